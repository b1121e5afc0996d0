package patroni

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
)

// etcdMember is one member of the private etcd.
type etcdMember struct {
	name                 string
	clientPort, peerPort int
}

func (e etcdMember) clientURL() string { return fmt.Sprintf("http://127.0.0.1:%d", e.clientPort) }
func (e etcdMember) peerURL() string   { return fmt.Sprintf("http://127.0.0.1:%d", e.peerPort) }

// startEtcd starts a three-member etcd and waits until every member
// reports itself healthy.
func (c *Cluster) startEtcd(ctx context.Context) error {
	p, err := ports(6)
	if err != nil {
		return err
	}
	members := make([]etcdMember, 3)
	initial := make([]string, 3)
	for i := range members {
		members[i] = etcdMember{name: fmt.Sprintf("etcd%d", i+1), clientPort: p[2*i], peerPort: p[2*i+1]}
		initial[i] = members[i].name + "=" + members[i].peerURL()
	}
	for _, m := range members {
		dir := filepath.Join(c.dir, m.name)
		if err := c.mkdir(dir); err != nil {
			return err
		}
		proc, err := c.start(filepath.Join(dir, "etcd.log"), "etcd",
			"--name", m.name, "--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", m.clientURL(), "--advertise-client-urls", m.clientURL(),
			"--listen-peer-urls", m.peerURL(), "--initial-advertise-peer-urls", m.peerURL(),
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", c.scope)
		if err != nil {
			return fmt.Errorf("start %s: %w", m.name, err)
		}
		c.etcd = append(c.etcd, proc)
	}
	c.etcdHosts = make([]string, len(members))
	for i, m := range members {
		c.etcdHosts[i] = fmt.Sprintf("127.0.0.1:%d", m.clientPort)
		url := m.clientURL() + "/health"
		if err := poll(ctx, m.name+" to be healthy", func() (bool, string) { return healthy(ctx, url) }); err != nil {
			return fmt.Errorf("%w\n%s", err, tail(filepath.Join(c.dir, m.name, "etcd.log"), 2000))
		}
	}
	c.logf("etcd: %s", strings.Join(c.etcdHosts, ","))
	return nil
}

// healthy reports whether url answers 200 with a body saying so.
func healthy(ctx context.Context, url string) (bool, string) {
	body, code, err := get(ctx, url)
	if err != nil {
		return false, err.Error()
	}
	return code == http.StatusOK && strings.Contains(body, `"health":"true"`), body
}
