package patroni

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// State is a member as Patroni's REST API (/cluster) reports it.
type State struct {
	Name  string `json:"name"`
	Role  string `json:"role"`  // leader, replica, sync_standby
	State string `json:"state"` // running, streaming, starting, stopped, ...
	Lag   any    `json:"lag"`
}

// States returns the members as the first agent that answers reports them.
func (c *Cluster) States(ctx context.Context) ([]State, error) {
	var lastErr error
	for _, m := range c.Members {
		body, code, err := get(ctx, m.API()+"/cluster")
		if err != nil || code != http.StatusOK {
			lastErr = fmt.Errorf("%s /cluster: %d %v", m.Name, code, err)
			continue
		}
		var out struct {
			Members []State `json:"members"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			return nil, fmt.Errorf("%s /cluster: %w", m.Name, err)
		}
		return out.Members, nil
	}
	return nil, lastErr
}

// Leader returns the member that holds the leader key and runs.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	states, err := c.States(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range states {
		if s.Role == "leader" && s.State == "running" {
			return c.Member(s.Name)
		}
	}
	return nil, fmt.Errorf("%w: %v", errNoLeader, states)
}

// WaitLeader waits until a member other than not (nil: any) leads and
// takes writes, and returns it.
func (c *Cluster) WaitLeader(ctx context.Context, not *Member) (*Member, error) {
	var leader *Member
	err := poll(ctx, "a new leader", func() (bool, string) {
		m, err := c.Leader(ctx)
		if err != nil {
			return false, err.Error()
		}
		if m == not {
			return false, m.Name + " still leads"
		}
		if ok, seen := m.primary(ctx); !ok {
			return false, seen
		}
		leader = m
		return true, ""
	})
	return leader, err
}

// primary reports whether the member's PostgreSQL takes writes, by its
// agent's /primary check.
func (m *Member) primary(ctx context.Context) (bool, string) {
	body, code, err := get(ctx, m.API()+"/primary")
	if err != nil {
		return false, err.Error()
	}
	return code == http.StatusOK, fmt.Sprintf("%s /primary: %d %s", m.Name, code, body)
}

// WaitHealthy waits until one member leads and every other streams from
// it (and, in synchronous mode, one of them is the synchronous standby).
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return poll(ctx, "a healthy cluster", func() (bool, string) {
		states, err := c.States(ctx)
		if err != nil {
			return false, err.Error()
		}
		seen := fmt.Sprint(states)
		leaders, streaming, sync := 0, 0, 0
		for _, s := range states {
			switch {
			case s.Role == "leader" && s.State == "running":
				leaders++
			case s.replicating():
				streaming++
				if s.Role == "sync_standby" {
					sync++
				}
			}
		}
		ok := leaders == 1 && streaming == len(c.Members)-1 && (!c.opts.SynchronousMode || sync >= 1)
		return ok, seen
	})
}

// WaitReplica waits until m runs as a replica of the leader.
func (c *Cluster) WaitReplica(ctx context.Context, m *Member) error {
	return poll(ctx, m.Name+" to run as a replica", func() (bool, string) {
		states, err := c.States(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, s := range states {
			if s.Name == m.Name {
				return s.replicating(), fmt.Sprint(s)
			}
		}
		return false, fmt.Sprint(states)
	})
}

// replicating reports whether the member runs as a replica whose lag
// behind the leader is known (Patroni reports "unknown" while it is not
// replaying the leader's WAL).
func (s State) replicating() bool {
	_, known := s.Lag.(float64)
	return (s.Role == "replica" || s.Role == "sync_standby") && (s.State == "running" || s.State == "streaming") && known
}

func (c *Cluster) patronictl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "patronictl", append([]string{"-c", c.Members[0].config()}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// get fetches url and returns its body and status.
func get(ctx context.Context, url string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return strings.TrimSpace(string(b)), res.StatusCode, err
}
