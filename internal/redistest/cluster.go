package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// clusterArgs configure every node of a test cluster. Each node runs in its
// own directory, so the config file name can be the same for all. The node
// timeout is long enough that a loaded test machine (a node not answering
// its peers for a few seconds) never sets off an automatic failover; the
// tests rely on none.
var clusterArgs = []string{
	"--cluster-enabled", "yes",
	"--cluster-config-file", "nodes.conf",
	"--cluster-node-timeout", "5000",
	"--repl-diskless-sync", "yes",
	"--repl-diskless-sync-delay", "0",
	"--logfile", "redis.log",
	"--loglevel", "notice",
}

// Cluster is a Redis Cluster of three masters with one replica each, started
// by StartCluster for one test and stopped when that test ends.
type Cluster struct {
	// Nodes are the six servers, in the order given to
	// "redis-cli --cluster create". Roles change with failovers: Shards
	// reports the current ones.
	Nodes []*Server

	admin  map[string]*redis.Client // one plain client per node, for inspection
	killed map[string]bool          // addresses of the nodes Kill killed
}

// Shard is one master of a Cluster with its replicas and slots, as the
// cluster reports them.
type Shard struct {
	Master   string   // address of the master
	MasterID string   // its cluster node ID
	Replicas []string // addresses of its replicas, sorted
	Slots    [][2]int // the inclusive slot ranges it serves, sorted
}

// Owns reports whether the shard serves slot.
func (s Shard) Owns(slot int) bool {
	for _, r := range s.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// StartCluster starts a cluster of three masters and three replicas on free
// loopback ports below 55536 (so each cluster bus port, port+10000, fits),
// joins them with "redis-cli --cluster create" and waits until the cluster
// is ready (see WaitReady). The cluster is stopped, and its files removed,
// when t ends.
//
// Without redis-server or redis-cli the test is skipped, or fails under
// CI=true. Any other startup problem fails the test.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	if _, err := Binary("redis-server"); err != nil {
		missing(t, err)
	}
	cli, err := Binary("redis-cli")
	if err != nil {
		missing(t, err)
	}
	c := &Cluster{admin: map[string]*redis.Client{}, killed: map[string]bool{}}
	t.Cleanup(c.stop)
	if err := c.start(cli); err != nil {
		t.Fatalf("redistest: starting a Redis Cluster: %v", err)
	}
	return c
}

func (c *Cluster) start(cli string) error {
	for i := 0; i < 6; i++ {
		s, err := Start(clusterArgs)
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		c.Nodes = append(c.Nodes, s)
		c.admin[s.Addr] = redis.NewClient(&redis.Options{
			Addr: s.Addr, MaxRetries: -1, PoolSize: 2,
			DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	return c.WaitReady(ctx)
}

// stop stops every node and removes its directory.
func (c *Cluster) stop() {
	for _, a := range c.admin {
		a.Close()
	}
	for _, s := range c.Nodes {
		s.Stop()
		os.RemoveAll(s.dir)
	}
}

// Addrs returns the addresses of all six nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Client returns a new cluster client of c, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Node returns a plain client of the node at addr, for commands aimed at one
// node (ROLE, INFO, SCAN, CLUSTER ...), or nil when no node has that
// address. It belongs to c: do not close it.
func (c *Cluster) Node(addr string) *redis.Client {
	return c.admin[addr]
}

// Masters returns the addresses of the current masters, in slot order.
func (c *Cluster) Masters(ctx context.Context) ([]string, error) {
	shards, err := c.Shards(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(shards))
	for i, s := range shards {
		out[i] = s.Master
	}
	return out, nil
}

// Replicas returns the addresses of the current replicas.
func (c *Cluster) Replicas(ctx context.Context) ([]string, error) {
	shards, err := c.Shards(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range shards {
		out = append(out, s.Replicas...)
	}
	return out, nil
}

// ShardOf returns the shard that serves slot.
func (c *Cluster) ShardOf(ctx context.Context, slot int) (Shard, error) {
	shards, err := c.Shards(ctx)
	if err != nil {
		return Shard{}, err
	}
	for _, s := range shards {
		if s.Owns(slot) {
			return s, nil
		}
	}
	return Shard{}, fmt.Errorf("no shard serves slot %d", slot)
}

// Shards returns the current masters with their replicas and slots, sorted
// by slot. Every node is asked (CLUSTER NODES), but those killed by Kill:
// all of them must agree on which master serves which slots; each replica
// is listed under the master it reports following itself.
func (c *Cluster) Shards(ctx context.Context) ([]Shard, error) {
	shards, _, err := c.topology(ctx)
	return shards, err
}

// clusterNode is one line of a CLUSTER NODES reply.
type clusterNode struct {
	id, addr, master string // master: the followed master's ID, or "-"
	flags            []string
	link             string
	slots            [][2]int
}

func (n clusterNode) has(flag string) bool {
	for _, f := range n.flags {
		if f == flag {
			return true
		}
	}
	return false
}

// topology returns the shards as in Shards and the problems that make the
// cluster not ready yet although the nodes agree: a node flagged as failing
// or in handshake, or a disconnected bus link, in some node's view.
func (c *Cluster) topology(ctx context.Context) ([]Shard, []string, error) {
	var (
		view, viewAddr string
		shards         []Shard
		byID           = map[string]*Shard{}
		followers      = map[string][]string{} // master ID -> replica addrs, as the replicas say
		problems       []string
	)
	for _, s := range c.Nodes {
		if c.killed[s.Addr] {
			continue
		}
		text, err := c.admin[s.Addr].ClusterNodes(ctx).Result()
		if err != nil {
			return nil, nil, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
		}
		nodes, err := parseClusterNodes(text)
		if err != nil {
			return nil, nil, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
		}
		var masters []Shard
		for _, n := range nodes {
			for _, f := range []string{"fail", "fail?", "handshake", "noaddr"} {
				if n.has(f) {
					problems = append(problems, fmt.Sprintf("%s sees %s as %s", s.Addr, n.addr, f))
				}
			}
			if n.link != "connected" {
				problems = append(problems, fmt.Sprintf("%s sees its link to %s %s", s.Addr, n.addr, n.link))
			}
			if n.has("myself") && n.has("slave") {
				followers[n.master] = append(followers[n.master], n.addr)
			}
			if n.has("master") && len(n.slots) > 0 {
				masters = append(masters, Shard{Master: n.addr, MasterID: n.id, Slots: n.slots})
			}
		}
		sort.Slice(masters, func(i, j int) bool { return masters[i].Slots[0][0] < masters[j].Slots[0][0] })
		v := fmt.Sprint(masters)
		if shards == nil {
			view, viewAddr, shards = v, s.Addr, masters
			continue
		}
		if v != view {
			return nil, nil, fmt.Errorf("nodes disagree on the masters: %s sees %s, %s sees %s", viewAddr, view, s.Addr, v)
		}
	}
	for i := range shards {
		byID[shards[i].MasterID] = &shards[i]
	}
	for id, addrs := range followers {
		sh := byID[id]
		if sh == nil {
			return nil, nil, fmt.Errorf("replicas %v follow %s, which serves no slot", addrs, id)
		}
		sh.Replicas = append(sh.Replicas, addrs...)
		sort.Strings(sh.Replicas)
	}
	return shards, problems, nil
}

// parseClusterNodes parses a CLUSTER NODES reply: lines of "<id>
// <ip:port@cport[,hostname]> <flags> <master id|-> <ping-sent> <pong-recv>
// <config-epoch> <link-state> <slot or range>...".
func parseClusterNodes(text string) ([]clusterNode, error) {
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("short line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3], link: f[7]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being migrated
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("bad slot %q in line %q", s, line)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		sort.Slice(n.slots, func(i, j int) bool { return n.slots[i][0] < n.slots[j][0] })
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// WaitReady waits until every node reports cluster_state:ok with all 16384
// slots served and all six nodes known, the nodes agree on three masters,
// no node sees another failing or its bus link down, and each master has
// one replica whose link is up and synced. It gives up with the last
// problem seen when ctx is done, or after 30 seconds when ctx has no
// deadline.
func (c *Cluster) WaitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	if err := waitFor(ctx, func() error { return c.ready(ctx) }); err != nil {
		return fmt.Errorf("cluster: %v%s", err, c.logTails())
	}
	return nil
}

func (c *Cluster) ready(ctx context.Context) error {
	for _, s := range c.Nodes {
		info, err := c.admin[s.Addr].ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", s.Addr, err)
		}
		for field, want := range map[string]string{
			"cluster_state":       "ok",
			"cluster_slots_ok":    strconv.Itoa(ClusterSlots),
			"cluster_known_nodes": strconv.Itoa(len(c.Nodes)),
		} {
			if got := infoField(info, field); got != want {
				return fmt.Errorf("%s: %s is %q, want %q", s.Addr, field, got, want)
			}
		}
	}
	shards, problems, err := c.topology(ctx)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	if len(shards) != 3 {
		return fmt.Errorf("%d masters serve slots, want 3: %v", len(shards), shards)
	}
	for _, sh := range shards {
		if len(sh.Replicas) != 1 {
			return fmt.Errorf("master %s has replicas %v, want one", sh.Master, sh.Replicas)
		}
		if err := replicaSynced(ctx, c.admin[sh.Master], c.admin[sh.Replicas[0]]); err != nil {
			return err
		}
	}
	return nil
}

// replicaSynced returns nil when replica is connected to master and has
// completed its sync, and master counts it as online.
func replicaSynced(ctx context.Context, master, replica *redis.Client) error {
	info, err := replica.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO on replica %s: %w", replica.Options().Addr, err)
	}
	if role := infoField(info, "role"); role != "slave" {
		return fmt.Errorf("%s has role %q, want slave", replica.Options().Addr, role)
	}
	if link := infoField(info, "master_link_status"); link != "up" {
		return fmt.Errorf("replica %s: master link %q", replica.Options().Addr, link)
	}
	if infoField(info, "master_sync_in_progress") != "0" {
		return fmt.Errorf("replica %s is still syncing", replica.Options().Addr)
	}
	want := "port=" + strings.TrimPrefix(replica.Options().Addr, "127.0.0.1:") + ","
	info, err = master.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO on master %s: %w", master.Options().Addr, err)
	}
	for i := 0; ; i++ {
		line := infoField(info, "slave"+strconv.Itoa(i))
		if line == "" {
			return fmt.Errorf("master %s does not list replica %s as online", master.Options().Addr, replica.Options().Addr)
		}
		if strings.Contains(line, want) && strings.Contains(line, "state=online") {
			return nil
		}
	}
}

// Role returns the role the node at addr reports (ROLE): "master" or
// "slave".
func (c *Cluster) Role(ctx context.Context, addr string) (string, error) {
	return role(ctx, c.admin[addr])
}

func role(ctx context.Context, client *redis.Client) (string, error) {
	v, err := client.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(v) == 0 {
		return "", errors.New("empty ROLE reply")
	}
	r, _ := v[0].(string)
	return r, nil
}

// Failover promotes the replica at replicaAddr with a coordinated manual
// failover (CLUSTER FAILOVER, no FORCE: its master stops writes until the
// replica has caught up, so no acknowledged write is lost). It first waits
// until every node knows the replica as such (the masters vote only for
// known replicas), then until the replica reports itself master, then
// until the cluster is ready again (see WaitReady). It returns when done, or the last problem seen when ctx ends
// (30 seconds when ctx has no deadline). The promotion is retried when a
// manual failover times out without one.
func (c *Cluster) Failover(ctx context.Context, replicaAddr string) error {
	node := c.admin[replicaAddr]
	if node == nil {
		return fmt.Errorf("%s is not a node of the cluster", replicaAddr)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	if err := c.WaitReplicaKnown(ctx, replicaAddr); err != nil {
		return fmt.Errorf("before the failover: %v", err)
	}
	start := time.Now()
	for {
		if err := node.ClusterFailover(ctx).Err(); err != nil {
			return fmt.Errorf("CLUSTER FAILOVER on %s: %w", replicaAddr, err)
		}
		// A manual failover that cannot complete is abandoned after 5s.
		attempt := time.Now()
		for time.Since(attempt) < 6*time.Second {
			r, err := role(ctx, node)
			if err == nil && r == "master" {
				return c.WaitReady(ctx)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not promoted after %s (role %q, %v)%s", replicaAddr, time.Since(start).Round(time.Millisecond), r, err, c.logTails())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// WaitReplicaKnown waits until every live node knows the node at addr as a
// replica of the master it follows. The masters vote in a failover only
// for a node they know as a replica, and they learn it from its pings,
// which come every few seconds; Failover waits for this itself, so a test
// calls it first only to time the failover alone. It gives up with the
// last problem seen when ctx is done, or after 30 seconds when ctx has no
// deadline.
func (c *Cluster) WaitReplicaKnown(ctx context.Context, addr string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	return waitFor(ctx, func() error { return c.knownAsReplica(ctx, addr) })
}

// knownAsReplica returns nil when every node knows the node at addr as a
// replica of the master it follows.
func (c *Cluster) knownAsReplica(ctx context.Context, addr string) error {
	var master string
	views := map[string][]clusterNode{}
	for _, s := range c.Nodes {
		if c.killed[s.Addr] {
			continue
		}
		text, err := c.admin[s.Addr].ClusterNodes(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
		}
		if views[s.Addr], err = parseClusterNodes(text); err != nil {
			return fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
		}
		if s.Addr == addr {
			for _, n := range views[s.Addr] {
				if n.has("myself") {
					master = n.master
				}
			}
		}
	}
	if master == "" || master == "-" {
		return fmt.Errorf("%s is not a replica", addr)
	}
	for viewer, nodes := range views {
		for _, n := range nodes {
			if n.addr == addr && (!n.has("slave") || n.master != master) {
				return fmt.Errorf("%s does not know %s as a replica of %s yet (flags %v, master %s)", viewer, addr, master, n.flags, n.master)
			}
		}
	}
	return nil
}

// logTails returns the last lines of every node's log, for error reports.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, s := range c.Nodes {
		b.WriteString(logTail(s))
	}
	return b.String()
}

// logTail returns the last lines of the log of s, when it writes one to
// redis.log in its directory.
func logTail(s *Server) string {
	data, err := os.ReadFile(s.dir + "/redis.log")
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return fmt.Sprintf("\n--- %s log:\n%s", s.Addr, strings.Join(lines, "\n"))
}

// infoField returns the value of field in an INFO-style reply ("name:value"
// lines), or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Slot returns the Redis Cluster hash slot of key, as CLUSTER KEYSLOT does:
// the CRC16 (XMODEM) of the key, or of its hash tag (the text between the
// first '{' and the next '}', when not empty), modulo 16384.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % ClusterSlots
}

// MigrateKeysPerCall is how many keys MigrateSlots moves with one MIGRATE.
// It is small so that a slot under load spends a while half moved, its
// keys on both masters, as in a reshard of a big slot.
const MigrateKeysPerCall = 5

// MigrateSlots moves slots from the master from to the master to, one slot
// after the other, the way "redis-cli --cluster reshard" does: CLUSTER
// SETSLOT IMPORTING on to, SETSLOT MIGRATING on from, then CLUSTER
// GETKEYSINSLOT and MIGRATE (the KEYS form, MigrateKeysPerCall keys at a
// time, without REPLACE: a key already on to is an error) until the slot
// is empty on from, then SETSLOT NODE on to, on from and on every client
// of others (the other masters; the rest of the cluster learns the new
// owner by gossip). Clients deciding meanwhile are redirected with ASK
// (a key already moved, or not there) or MOVED (a slot done), or refused
// with TRYAGAIN (a multi-key command whose keys are split between the two
// masters). It returns the first error, naming the slot and step; the
// slot it was moving is then left half moved.
func MigrateSlots(ctx context.Context, from, to *redis.Client, slots []int, others ...*redis.Client) error {
	fromID, err := from.ClusterMyID(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER MYID on %s: %w", from.Options().Addr, err)
	}
	toID, err := to.ClusterMyID(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER MYID on %s: %w", to.Options().Addr, err)
	}
	host, port, ok := strings.Cut(to.Options().Addr, ":")
	if !ok {
		return fmt.Errorf("migrate: address %q has no port", to.Options().Addr)
	}
	for _, slot := range slots {
		if err := to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
			return fmt.Errorf("slot %d: SETSLOT IMPORTING on %s: %w", slot, to.Options().Addr, err)
		}
		if err := from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
			return fmt.Errorf("slot %d: SETSLOT MIGRATING on %s: %w", slot, from.Options().Addr, err)
		}
		for {
			keys, err := from.ClusterGetKeysInSlot(ctx, slot, MigrateKeysPerCall).Result()
			if err != nil {
				return fmt.Errorf("slot %d: GETKEYSINSLOT on %s: %w", slot, from.Options().Addr, err)
			}
			if len(keys) == 0 {
				break
			}
			args := []any{"MIGRATE", host, port, "", 0, 10000, "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			// "NOKEY": the keys expired or were deleted meanwhile.
			if err := from.Do(ctx, args...).Err(); err != nil && err.Error() != "NOKEY" {
				return fmt.Errorf("slot %d: MIGRATE of %q from %s to %s: %w", slot, keys, from.Options().Addr, to.Options().Addr, err)
			}
		}
		for _, c := range append([]*redis.Client{to, from}, others...) {
			if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(); err != nil {
				return fmt.Errorf("slot %d: SETSLOT NODE on %s: %w", slot, c.Options().Addr, err)
			}
		}
	}
	return nil
}

// MigrateSlots moves slots from the master at fromAddr to the master at
// toAddr with MigrateSlots, naming the other masters (as fromAddr knows
// them) as others. It does
// not wait for the replicas to learn the new owners: WaitReady does.
func (c *Cluster) MigrateSlots(ctx context.Context, fromAddr, toAddr string, slots []int) error {
	from, to := c.admin[fromAddr], c.admin[toAddr]
	if from == nil || to == nil {
		return fmt.Errorf("migrate from %s to %s: not both nodes of the cluster", fromAddr, toAddr)
	}
	// The masters as from sees them: while slots move, the nodes may
	// disagree for a moment on who serves the last ones moved.
	text, err := from.ClusterNodes(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER NODES on %s: %w", fromAddr, err)
	}
	nodes, err := parseClusterNodes(text)
	if err != nil {
		return fmt.Errorf("CLUSTER NODES on %s: %w", fromAddr, err)
	}
	var others []*redis.Client
	for _, n := range nodes {
		if n.has("master") && len(n.slots) > 0 && !n.has("fail") && n.addr != fromAddr && n.addr != toAddr && c.admin[n.addr] != nil {
			others = append(others, c.admin[n.addr])
		}
	}
	return MigrateSlots(ctx, from, to, slots, others...)
}

// Kill kills the node at addr (SIGKILL: no goodbye to its peers, nothing
// saved). It stays down; the cluster is no longer ready as WaitReady
// means it, since its peers see it failing: WaitPromoted waits for a
// replica to take over its slots. Shards and what uses it (Masters,
// ShardOf ...) ask the live nodes only from then on. Kill is not safe
// for use concurrently with the other methods.
func (c *Cluster) Kill(addr string) error {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			s.Stop()
			c.killed[addr] = true
			return nil
		}
	}
	return fmt.Errorf("%s is not a node of the cluster", addr)
}

// WaitPromoted waits until the node at addr reports itself master and
// every live node (one Kill did not kill) sees it serving slot, with
// cluster_state:ok. It is for a cluster with a killed node, where
// WaitReady never succeeds. It gives up with the last problem seen when
// ctx is done, or after 30 seconds when ctx has no deadline.
func (c *Cluster) WaitPromoted(ctx context.Context, addr string, slot int) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	node := c.admin[addr]
	if node == nil {
		return fmt.Errorf("%s is not a node of the cluster", addr)
	}
	err := waitFor(ctx, func() error {
		if r, err := role(ctx, node); err != nil || r != "master" {
			return fmt.Errorf("%s has role %q (%v)", addr, r, err)
		}
		for _, s := range c.Nodes {
			if c.killed[s.Addr] {
				continue
			}
			info, err := c.admin[s.Addr].ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("CLUSTER INFO on %s: %w", s.Addr, err)
			}
			if st := infoField(info, "cluster_state"); st != "ok" {
				return fmt.Errorf("%s: cluster_state %q", s.Addr, st)
			}
			text, err := c.admin[s.Addr].ClusterNodes(ctx).Result()
			if err != nil {
				return fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
			}
			nodes, err := parseClusterNodes(text)
			if err != nil {
				return fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
			}
			owner := ""
			for _, n := range nodes {
				if n.has("master") && !n.has("fail") {
					for _, r := range n.slots {
						if slot >= r[0] && slot <= r[1] {
							owner = n.addr
						}
					}
				}
			}
			if owner != addr {
				return fmt.Errorf("%s sees slot %d served by %q, want %s", s.Addr, slot, owner, addr)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("promotion of %s: %v%s", addr, err, c.logTails())
	}
	return nil
}
