package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Where a round's CPU goes: the server, PostgreSQL and this process (the
// clients and the instant provider) share the machine, so each one's CPU
// per review says which of them a faster service would have to shed.

// procStat is one process's CPU times from /proc/<pid>/stat: its own
// (user and system), and that of its children it has waited for.
type procStat struct {
	ppid       int
	own, waits time.Duration
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// parseProcStat reads the contents of /proc/<pid>/stat (proc(5)).
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("unexpected /proc stat: %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("unexpected /proc stat: %q", b)
	}
	var v [15]int64
	for _, k := range []int{1, 11, 12, 13, 14} {
		var err error
		if v[k], err = strconv.ParseInt(f[k], 10, 64); err != nil {
			return procStat{}, fmt.Errorf("unexpected /proc stat: field %d: %w", k+3, err)
		}
	}
	const ticks = 100 // USER_HZ on Linux
	tick := func(v int64) time.Duration { return time.Duration(v) * time.Second / ticks }
	// After the ")": state, ppid, ..., utime (11), stime, cutime, cstime.
	return procStat{ppid: int(v[1]), own: tick(v[11] + v[12]), waits: tick(v[13] + v[14])}, nil
}

// processCPU is the CPU time a process has used so far.
func processCPU(pid int) (time.Duration, error) {
	s, err := readProcStat(pid)
	return s.own, err
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pgServer is a PostgreSQL server running on this machine, whose CPU the
// bench can read: its postmaster's, with every backend and helper process,
// live or ended.
type pgServer struct{ pid int }

// findPG finds the server of adminURL among this machine's processes, from
// the postmaster.pid of its data directory; nil when it is not readable
// here (another machine, another user), and the figure is then left out.
func findPG(ctx context.Context, adminURL string) *pgServer {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil
	}
	defer func() { _ = conn.Close(ctx) }()
	var dir string
	if conn.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&dir) != nil {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return nil
	}
	if _, err := readProcStat(pid); err != nil {
		return nil
	}
	return &pgServer{pid: pid}
}

// cpu is the server's CPU time so far: the postmaster's own and its ended
// children's, and every live child's.
func (p *pgServer) cpu() (time.Duration, error) {
	if p == nil {
		return 0, nil
	}
	root, err := readProcStat(p.pid)
	if err != nil {
		return 0, fmt.Errorf("PostgreSQL's CPU: %w", err)
	}
	total := root.own + root.waits
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("PostgreSQL's CPU: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := readProcStat(pid)
		if errors.Is(err, os.ErrNotExist) {
			continue // ended while listed: its time is in the postmaster's
		}
		if err == nil && s.ppid == p.pid {
			total += s.own
		}
	}
	return total, nil
}

// cpuMeter measures the CPU of the server, PostgreSQL and this process
// over a span.
type cpuMeter struct {
	server func() (time.Duration, error) // nil: no server (the CRUD round)
	pg     *pgServer

	server0, pg0, self0 time.Duration
}

func (m *cpuMeter) start() error {
	var err error
	if m.server != nil {
		if m.server0, err = m.server(); err != nil {
			return err
		}
	}
	if m.pg0, err = m.pg.cpu(); err != nil {
		return err
	}
	m.self0 = selfCPU()
	return nil
}

// perReview is each one's CPU since start, divided by n reviews.
func (m *cpuMeter) perReview(n int) (cpuShare, error) {
	var s cpuShare
	self := selfCPU()
	pg, err := m.pg.cpu()
	if err != nil {
		return s, err
	}
	if m.server != nil {
		srv, err := m.server()
		if err != nil {
			return s, err
		}
		s.Server = (srv - m.server0) / time.Duration(n)
	}
	if m.pg != nil {
		s.Postgres = (pg - m.pg0) / time.Duration(n)
	}
	s.Bench = (self - m.self0) / time.Duration(n)
	return s, nil
}

// cpuShare is CPU per review: the server's, PostgreSQL's (0 when not
// measured) and this process's.
type cpuShare struct {
	Server, Postgres, Bench time.Duration
}

// total is the CPU of every process measured.
func (c cpuShare) total() time.Duration { return c.Server + c.Postgres + c.Bench }
