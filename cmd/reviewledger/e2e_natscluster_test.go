package main

// The work stream on a JetStream cluster of the test's own.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// natsCluster is a private NATS cluster of the test's own: nats-server
// processes on free loopback ports, routes between every pair, JetStream
// on each with its own store directory. Its nodes are stopped when the
// test ends.
type natsCluster struct {
	t     *testing.T
	bin   string
	nodes []*natsNode
}

type natsNode struct {
	name          string
	port, cluster int
	conf          string
	cmd           *exec.Cmd
	logs          *lockedBuffer
	done          chan struct{}
}

// natsServerBin finds nats-server: skips the test when it is missing,
// unless CI is set (then it fails).
func natsServerBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("nats-server is not installed (CI is set, so this fails): install the nats-server package")
	}
	t.Skip("nats-server is not installed (the nats-server package): skipping the NATS cluster test")
	return ""
}

// freePortNum returns a loopback port nothing listens on, below the
// kernel's ephemeral ports: a port the kernel hands out for port 0 may be
// taken by an outgoing connection (a NATS route) before the server that
// was to listen on it starts.
func freePortNum(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return 0
}

// startNATSCluster starts n nodes and waits until JetStream answers on
// every one of them.
func startNATSCluster(t *testing.T, n int) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t, bin: natsServerBin(t)}
	dir := t.TempDir()
	for i := range n {
		c.nodes = append(c.nodes, &natsNode{name: fmt.Sprintf("n%d", i+1), port: freePortNum(t), cluster: freePortNum(t)})
	}
	for _, node := range c.nodes {
		var routes []string
		for _, other := range c.nodes {
			if other != node {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", other.cluster))
			}
		}
		store := filepath.Join(dir, node.name)
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 256MB
}
cluster {
  name: reviewledger_test
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, node.name, node.port, store, node.cluster, strings.Join(routes, ", "))
		node.conf = filepath.Join(dir, node.name+".conf")
		if err := os.WriteFile(node.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.start(node)
	}
	t.Cleanup(c.stop)
	for _, node := range c.nodes {
		c.waitJetStream(node)
	}
	return c
}

func (c *natsCluster) start(node *natsNode) {
	c.t.Helper()
	node.logs, node.done = &lockedBuffer{}, make(chan struct{})
	node.cmd = exec.Command(c.bin, "-c", node.conf)
	node.cmd.Stdout, node.cmd.Stderr = node.logs, node.logs
	if err := node.cmd.Start(); err != nil {
		c.t.Fatalf("start nats-server %s: %v", node.name, err)
	}
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(node.cmd, node.done)
}

// waitJetStream waits until node answers JetStream requests (it has a
// meta leader).
func (c *natsCluster) waitJetStream(node *natsNode) {
	c.t.Helper()
	clocktest.EventuallyShows(c.t, "JetStream to answer on nats-server "+node.name, func() (bool, string) {
		nc, err := nats.Connect(node.url(), nats.Timeout(time.Second))
		if err == nil {
			js, jerr := jetstream.New(nc)
			if jerr == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, jerr = js.AccountInfo(ctx)
				cancel()
			}
			nc.Close()
			if jerr == nil {
				return true, ""
			}
			err = jerr
		}
		return false, fmt.Sprintf("%v\n%s", err, node.logs.String())
	})
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// URLs is REVIEWLEDGER_NATS_URL for the cluster: every node.
func (c *natsCluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.url()
	}
	return strings.Join(urls, ",")
}

// node returns the node named name.
func (c *natsCluster) node(name string) *natsNode {
	c.t.Helper()
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	c.t.Fatalf("no NATS node %q", name)
	return nil
}

// kill ends a node with SIGKILL.
func (c *natsCluster) kill(node *natsNode) {
	c.t.Helper()
	if err := node.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	<-node.done
}

// restart starts a killed node again, on its ports and store, and waits
// until it answers JetStream requests.
func (c *natsCluster) restart(node *natsNode) {
	c.t.Helper()
	c.start(node)
	c.waitJetStream(node)
}

// stop ends every node still running (SIGTERM, then SIGKILL).
func (c *natsCluster) stop() {
	for _, n := range c.nodes {
		select {
		case <-n.done:
			continue
		default:
		}
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
		}
		if c.t.Failed() {
			c.t.Logf("logs of nats-server %s:\n%s", n.name, n.logs.String())
		}
	}
}

// streamInfo asks the cluster (any node that answers) for a stream's
// state and placement.
func (c *natsCluster) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	nc, err := nats.Connect(c.URLs(), nats.Timeout(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.Cluster == nil {
		return nil, errors.New("stream info has no cluster placement")
	}
	return info, nil
}

// streamLeader polls until the stream has a leader, and returns its
// name.
func (c *natsCluster) streamLeader(stream string, not string) string {
	c.t.Helper()
	var leader string
	clocktest.EventuallyShows(c.t, fmt.Sprintf("stream %s to have a leader other than %q", stream, not), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		info, err := c.streamInfo(ctx, stream)
		cancel()
		switch {
		case err != nil:
			return false, err.Error()
		case info.Cluster.Leader != "" && info.Cluster.Leader != not:
			leader = info.Cluster.Leader
			return true, ""
		}
		return false, fmt.Sprintf("leader %q", info.Cluster.Leader)
	})
	return leader
}

// TestE2ENATSCluster: the work stream on a three-node JetStream cluster,
// three replicas; one API process (with the projector and sweeper) and
// two worker processes, all given every node in REVIEWLEDGER_NATS_URL.
// Under load (300 reviews, the provider answering in 200 ms) the stream's
// leader node is killed with SIGKILL and later started again: every
// review is decided exactly once, attempts never exceed max_attempts,
// nothing is left pending, in the manual queue or in the stream. How long
// the stream was without a leader is logged.
func TestE2ENATSCluster(t *testing.T) {
	t.Parallel()
	nc := startNATSCluster(t, 3)
	prov := newLoadProvider(t, 200*time.Millisecond, false)
	env := loadEnv(t, dbtest.URL(t), prov.URL())
	topic := fmt.Sprintf("rl_cluster_%d", time.Now().UnixNano())
	env["REVIEWLEDGER_PUBSUB"] = "nats"
	env["REVIEWLEDGER_NATS_URL"] = nc.URLs()
	env["REVIEWLEDGER_NATS_REPLICAS"] = "3"
	env["REVIEWLEDGER_WORK_TOPIC"] = topic
	api := startServe(t, merged(env, map[string]string{"REVIEWLEDGER_ROLES": "api,projector,sweeper"}))
	workers := []*serveProc{
		startServe(t, merged(env, map[string]string{"REVIEWLEDGER_ROLES": "worker"})),
		startServe(t, merged(env, map[string]string{"REVIEWLEDGER_ROLES": "worker"})),
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	info, err := nc.streamInfo(ctx, topic)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream %s: %d replicas configured, placed on leader %s and %d more, want 3", topic, info.Config.Replicas, info.Cluster.Leader, len(info.Cluster.Replicas))
	}

	ids := reviewIDs("cluster", 300)
	done := make(chan struct{})
	go func() {
		defer close(done)
		submitAll(t, []*serveProc{api}, ids, "e2e_load", 16)
	}()
	time.Sleep(time.Second)
	leader := nc.streamLeader(topic, "")
	victim := nc.node(leader)
	nc.kill(victim)
	killed := time.Now()
	next := nc.streamLeader(topic, leader)
	t.Logf("stream leader %s killed; %s leads %s later", leader, next, time.Since(killed).Round(10*time.Millisecond))
	time.Sleep(2 * time.Second)
	nc.restart(victim)
	t.Logf("%s restarted %s after its kill", leader, time.Since(killed).Round(10*time.Millisecond))
	<-done

	for _, id := range ids {
		settledState(t, []*serveProc{api}, id)
	}
	t.Logf("every review decided %s after the kill; %d work messages the API could not publish (their reviews found by the poll)",
		time.Since(killed).Round(10*time.Millisecond), strings.Count(api.logs.String(), "publish review work"))
	checkOutcomes(t, api, prov, ids, "accepted", 3)
	if o := prov.overlapping(); len(o) > 0 {
		t.Errorf("calls in progress at once for one review: %v", o)
	}
	if items := api.queue(t, "?limit=1000"); len(items) != 0 {
		t.Errorf("%d reviews in the manual queue", len(items))
	}
	for _, w := range workers {
		if w.exited() {
			t.Errorf("worker %s exited: %v", w.URL, w.err)
		}
	}
	clocktest.EventuallyShows(t, "the stream to be empty and its restarted replica current", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		info, err := nc.streamInfo(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		current := 0
		for _, r := range info.Cluster.Replicas {
			if r.Current {
				current++
			}
		}
		return info.State.Msgs == 0 && current == 2, fmt.Sprintf("%d messages, leader %s, %d of %d replicas current",
			info.State.Msgs, info.Cluster.Leader, current, len(info.Cluster.Replicas))
	})
}
