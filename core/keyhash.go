package core

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
)

// hashKey is the secret key of Event.KeyHash: SipHash-2-4 of the user key
// under it, a keyed hash made for short inputs. Without the secret, a
// KeyHash read in a log tells nothing of its key, not even one from a small
// space (an IPv4 address, a numeric user id) that an unkeyed hash would let
// anyone find by hashing every candidate.
type hashKey struct{ k0, k1 uint64 }

// processHashKey is drawn at start-up: the KeyHash of a limiter without
// WithKeyHashSecret is stable within the process only.
var processHashKey = func() hashKey {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return hashKey{binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])}
}()

// secretHashKey derives the key of WithKeyHashSecret(secret).
func secretHashKey(secret string) hashKey {
	sum := sha256.Sum256([]byte("sluice KeyHash\x00" + secret))
	return hashKey{binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])}
}

// sum is SipHash-2-4 of s under k; it does not allocate.
func (k hashKey) sum(s string) uint64 {
	v0 := k.k0 ^ 0x736f6d6570736575
	v1 := k.k1 ^ 0x646f72616e646f6d
	v2 := k.k0 ^ 0x6c7967656e657261
	v3 := k.k1 ^ 0x7465646279746573
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13) ^ v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16) ^ v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21) ^ v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17) ^ v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	n := len(s)
	for ; len(s) >= 8; s = s[8:] {
		m := binary.LittleEndian.Uint64([]byte(s[:8]))
		v3 ^= m
		round()
		round()
		v0 ^= m
	}
	last := uint64(n) << 56 // the length's low byte, then what is left of s
	for i := len(s) - 1; i >= 0; i-- {
		last |= uint64(s[i]) << (8 * i)
	}
	v3 ^= last
	round()
	round()
	v0 ^= last
	v2 ^= 0xff
	for range 4 {
		round()
	}
	return v0 ^ v1 ^ v2 ^ v3
}

// shardHash is FNV-1a, 64 bits, for spreading keys over the deny cache's
// shards, where nothing is shown to anyone; it does not allocate.
func shardHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return h
}
