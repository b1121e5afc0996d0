package patroni

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Member is one Patroni node and its PostgreSQL.
type Member struct {
	Name    string
	PGPort  int // PostgreSQL's port on 127.0.0.1
	APIPort int // Patroni's REST API on 127.0.0.1
	c       *Cluster
	dir     string
	agent   *process
}

// API is the base URL of the member's Patroni REST API.
func (m *Member) API() string { return fmt.Sprintf("http://127.0.0.1:%d", m.APIPort) }

// URL is the connection string of database db on this member alone.
func (m *Member) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", m.PGPort, db)
}

func (m *Member) config() string { return filepath.Join(m.dir, "patroni.yml") }
func (m *Member) data() string   { return filepath.Join(m.dir, "data") }

// startMembers writes each node's configuration and starts its agent; the
// first to take the leader key bootstraps the cluster (initdb), the others
// copy it (pg_basebackup).
func (c *Cluster) startMembers() error {
	p, err := ports(6)
	if err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		m := &Member{Name: fmt.Sprintf("pg%d", i+1), PGPort: p[2*i], APIPort: p[2*i+1], c: c}
		m.dir = filepath.Join(c.dir, m.Name)
		if err := c.mkdir(m.dir); err != nil {
			return err
		}
		if err := c.writeFile(m.config(), c.memberConfig(m)); err != nil {
			return err
		}
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		if err := m.StartAgent(); err != nil {
			return err
		}
	}
	return nil
}

// memberConfig is a node's patroni.yml. The bootstrap section is the
// cluster's shared (DCS) configuration, which the first node writes.
func (c *Cluster) memberConfig(m *Member) string {
	return fmt.Sprintf(`scope: %[1]s
name: %[2]s
log:
  level: INFO
restapi:
  listen: 127.0.0.1:%[3]d
  connect_address: 127.0.0.1:%[3]d
etcd3:
  hosts: %[4]s
watchdog:
  mode: "off"
bootstrap:
  dcs:
    ttl: %[5]d
    loop_wait: %[6]d
    retry_timeout: %[7]d
    maximum_lag_on_failover: 1048576
    primary_start_timeout: 0
    synchronous_mode: %[8]t
    synchronous_mode_strict: %[8]t
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: "on"
        max_connections: 200
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        synchronous_commit: "on"
  initdb:
    - encoding: UTF8
    - auth: trust
postgresql:
  listen: 127.0.0.1:%[9]d
  connect_address: 127.0.0.1:%[9]d
  data_dir: %[10]s
  bin_dir: %[11]s
  pgpass: %[12]s
  use_unix_socket: true
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: postgres, password: postgres}
    rewind: {username: postgres, password: postgres}
  parameters:
    unix_socket_directories: %[13]s
    logging_collector: "off"
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
`, c.scope, m.Name, m.APIPort, strings.Join(c.etcdHosts, ","),
		int(DCSTTL/time.Second), int(LoopWait/time.Second), int(RetryTimeout/time.Second), c.opts.SynchronousMode,
		m.PGPort, m.data(), c.bin, filepath.Join(m.dir, "pgpass"), m.dir)
}

// StartAgent starts the member's Patroni agent (again): it starts the
// member's PostgreSQL, as a replica when another member holds the leader
// key, rewinding it first when it had been the primary.
func (m *Member) StartAgent() error {
	if m.agent.running() {
		return fmt.Errorf("%s: the agent runs already", m.Name)
	}
	p, err := m.c.start(filepath.Join(m.dir, "patroni.log"), "patroni", m.config())
	if err != nil {
		return fmt.Errorf("start the agent of %s: %w", m.Name, err)
	}
	m.agent = p
	m.c.logf("patroni: %s started (postgres on 127.0.0.1:%d, API %s)", m.Name, m.PGPort, m.API())
	return nil
}

// KillAgent ends the member's Patroni agent with SIGKILL, leaving its
// PostgreSQL running: a primary goes on taking writes until its agent's
// leader key expires (DCSTTL), when another member is promoted; PostgreSQL
// itself is not demoted by anyone until the agent is started again.
func (m *Member) KillAgent() {
	m.agent.kill()
	m.c.logf("patroni: %s agent killed", m.Name)
}

// KillPostgres ends the member's postmaster and its every process with
// SIGKILL, as a crash would; the agent sees it at its next loop.
func (m *Member) KillPostgres() error {
	if err := m.killPostmaster(); err != nil {
		return err
	}
	m.c.logf("patroni: %s postgres killed", m.Name)
	return nil
}

func (m *Member) killPostmaster() error {
	pid, err := m.postmaster()
	if err != nil {
		return err
	}
	// Patroni starts the postmaster in a session of its own: its group
	// is the postmaster and every backend.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// postmaster returns the member's postmaster's process ID, from
// postmaster.pid.
func (m *Member) postmaster() (int, error) {
	b, err := os.ReadFile(filepath.Join(m.data(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", m.Name, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("%s: postmaster.pid: %w", m.Name, err)
	}
	if syscall.Kill(pid, 0) != nil {
		return 0, fmt.Errorf("%s: postmaster %d is not running", m.Name, pid)
	}
	return pid, nil
}

func (m *Member) stopAgent(grace time.Duration) {
	m.agent.stop(grace)
}

// Switchover makes a replica the leader through `patronictl switchover`,
// as an operator would for planned work on the leader, and returns its
// name; the old leader goes on as a replica. In synchronous mode Patroni
// switches over only to the synchronous standby, so that one is chosen.
func (c *Cluster) Switchover(ctx context.Context) (string, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return "", err
	}
	states, err := c.States(ctx)
	if err != nil {
		return "", err
	}
	candidate := ""
	for _, s := range states {
		if s.replicating() && (s.Role == "sync_standby" || !c.opts.SynchronousMode) {
			candidate = s.Name
			break
		}
	}
	if candidate == "" {
		return "", fmt.Errorf("no candidate for a switchover: %v", states)
	}
	out, err := c.patronictl(ctx, "switchover", "--leader", leader.Name, "--candidate", candidate, "--force", c.scope)
	if err != nil {
		return "", fmt.Errorf("patronictl switchover: %w\n%s", err, out)
	}
	c.logf("patroni: switchover %s -> %s", leader.Name, candidate)
	return candidate, nil
}

// List is `patronictl list`: the members, their roles, states and lags.
func (c *Cluster) List(ctx context.Context) (string, error) {
	return c.patronictl(ctx, "list", c.scope)
}
