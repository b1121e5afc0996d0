package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// commits is what the server's group commit did: its batches, the stream
// appends in them, and the time spent writing them (the ledger's
// reviewledger_ledger_group_commit* counters).
type commits struct {
	Batches, Appends float64
	Writing          time.Duration
}

func (c commits) minus(o commits) commits {
	return commits{Batches: c.Batches - o.Batches, Appends: c.Appends - o.Appends, Writing: c.Writing - o.Writing}
}

// perBatch is the appends in a batch; busy the share of elapsed the
// batches were being written (1: one batch right after another, with one
// written at a time).
func (c commits) perBatch() float64 {
	if c.Batches == 0 {
		return 0
	}
	return c.Appends / c.Batches
}

func (c commits) busy(elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return c.Writing.Seconds() / elapsed.Seconds()
}

// commits reads the group commit's counters from the server's /metrics.
func (s *server) commits(ctx context.Context) (commits, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/metrics", nil)
	if err != nil {
		return commits{}, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return commits{}, fmt.Errorf("read /metrics: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return commits{}, fmt.Errorf("read /metrics: HTTP %d", res.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		return commits{}, fmt.Errorf("parse /metrics: %w", err)
	}
	value := func(name string) (float64, error) {
		f, ok := families[name]
		if !ok || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetCounter() == nil {
			return 0, fmt.Errorf("/metrics: no counter %s", name)
		}
		return f.GetMetric()[0].GetCounter().GetValue(), nil
	}
	var c commits
	var seconds float64
	for name, v := range map[string]*float64{
		"reviewledger_ledger_group_commits_total":        &c.Batches,
		"reviewledger_ledger_group_commit_appends_total": &c.Appends,
		"reviewledger_ledger_group_commit_seconds_total": &seconds,
	} {
		if *v, err = value(name); err != nil {
			return commits{}, err
		}
	}
	c.Writing = time.Duration(seconds * float64(time.Second))
	return c, nil
}
