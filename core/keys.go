package core

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
)

// maxRawKey is the longest user key stored as is; longer keys are hashed.
const maxRawKey = 64

// storedKey returns how a user key appears inside Redis keys: as is when it
// is short, non-empty, does not start with '#' and holds no '}'; otherwise
// '#' and the hex SHA-256 of the key (128 bits). No raw key starts with '#',
// so a raw key never equals a hashed one, and different user keys never
// share state. No stored key holds '}', so the hash tag "{<stored key>}" is
// always the whole stored key, never cut short or empty.
func storedKey(key string) string {
	if len(key) > 0 && len(key) <= maxRawKey && key[0] != '#' && strings.IndexByte(key, '}') < 0 {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + hex.EncodeToString(sum[:16])
}

// keys returns the Redis keys of key, one per rule:
// "<prefix>:{<stored key>}:<fingerprint>:<rule index>". The braces make the
// stored key the hash tag, so all of them share one Redis Cluster slot.
func (l *Limiter) keys(key string) []string {
	return keyStrings(l.appendKeys(nil, storedKey(key)))
}

// appendKeys appends the Redis keys of a stored key to dst, built in the
// buffers of dst's spare capacity: with a pooled call's keys, nothing is
// allocated once the buffers have grown to fit.
func (l *Limiter) appendKeys(dst []keyArg, stored string) []keyArg {
	for i := range l.rules {
		if len(dst) < cap(dst) {
			dst = dst[:len(dst)+1]
		} else {
			dst = append(dst, keyArg{})
		}
		k := &dst[len(dst)-1]
		k.b = append(append(append(append(k.b[:0], l.prefix...), ":{"...), stored...), l.suffixes[i]...)
	}
	return dst
}

// keyArg is one Redis key of a call, handed to go-redis by pointer as an
// encoding.BinaryMarshaler. A pointer goes into an interface as it is,
// where a string would be copied to the heap first; with the key's bytes
// in a buffer the pooled call keeps, a decision's keys allocate nothing.
type keyArg struct{ b []byte }

// MarshalBinary returns the key for go-redis to write. The bytes are the
// call's own: go-redis writes them before the call is answered and reused.
func (k *keyArg) MarshalBinary() ([]byte, error) { return k.b, nil }

// String returns the key: go-redis reads a cluster command's first key as
// a string to find its slot, and hooks print commands with it.
func (k *keyArg) String() string { return string(k.b) }

// keyStrings returns keys as strings (for a DEL, rare enough to copy).
func keyStrings(keys []keyArg) []string {
	ks := make([]string, len(keys))
	for i := range keys {
		ks[i] = string(keys[i].b)
	}
	return ks
}

// clusterSlot is the Redis Cluster slot of keys whose hash tag is tag:
// CRC16 (XMODEM) modulo 16384, as Redis computes it, a byte at a time.
func clusterSlot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^tag[i]]
	}
	return int(crc) & 16383
}

// crc16Table is the CRC16 (XMODEM, polynomial 0x1021) of each byte.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// slotKeys holds, for each Redis Cluster slot, a short key of that slot:
// what go-redis's ClusterClient.MasterForKey needs to name a slot, with no
// key string made per decision. About 160,000 CRCs on first use, by the
// first limiter on a cluster.
var slotKeys = sync.OnceValue(func() *[16384]string {
	var keys [16384]string
	left := len(keys)
	for n := int64(0); left > 0; n++ {
		k := strconv.FormatInt(n, 36)
		if s := clusterSlot(k); keys[s] == "" {
			keys[s] = k
			left--
		}
	}
	return &keys
})
