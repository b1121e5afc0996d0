package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// What a command writes to stderr. serve logs JSON lines (for a log
// collector); every other command is run by a person or a script, so it
// writes plain lines: its warnings as they happen, and when it fails one
// line naming the command and what failed, e.g.
//
//	reviewledger replay: review "nope": review not found

// commandName is the command as typed, without its arguments:
// "audit verify", "replay".
func commandName(full string) string {
	var words []string
	for _, w := range strings.Fields(full) {
		if !strings.HasPrefix(w, "<") {
			words = append(words, w)
		}
	}
	return strings.Join(words, " ")
}

// newLogger returns serve's JSON logger, or for any other command a
// logger writing warnings and errors as plain lines.
func newLogger(command string, stderr io.Writer) *slog.Logger {
	if command == "serve" {
		return slog.New(slog.NewJSONHandler(stderr, nil))
	}
	return slog.New(&lineHandler{w: stderr, prefix: "reviewledger " + command + ": ", mu: new(sync.Mutex)})
}

// failure is the one line a failed command ends with.
func failure(command string, err error) string {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	return "reviewledger " + command + ": " + msg
}

// lineHandler writes records at WARN and above as one line each:
// "reviewledger <command>: warning: <message> (key=value, ...)".
type lineHandler struct {
	w      io.Writer
	prefix string
	attrs  []slog.Attr
	group  string
	mu     *sync.Mutex
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.prefix)
	if r.Level >= slog.LevelError {
		b.WriteString("error: ")
	} else {
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	var kv []string
	add := func(a slog.Attr) {
		if a.Equal(slog.Attr{}) {
			return
		}
		key := a.Key
		if h.group != "" {
			key = h.group + "." + key
		}
		kv = append(kv, fmt.Sprintf("%s=%v", key, a.Value.Resolve()))
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	if len(kv) > 0 {
		b.WriteString(" (" + strings.Join(kv, ", ") + ")")
	}
	line := strings.Join(strings.Fields(strings.ReplaceAll(b.String(), "\n", "; ")), " ") + "\n"
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, line)
	return err
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
