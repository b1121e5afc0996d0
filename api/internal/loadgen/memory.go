package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// memory is the process's memory high-water marks.
type memory struct {
	PeakRSS       uint64 // VmHWM of /proc/self/status; 0 where unavailable
	PeakHeapAlloc uint64 // runtime.MemStats.HeapAlloc, sampled every 100ms
	PeakHeapInuse uint64
	PeakSys       uint64
	NumGC         uint32
	// PeakGoroutines is runtime.NumGoroutine, sampled with the heap.
	PeakGoroutines int
}

type memSampler struct {
	once sync.Once
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	m    memory
}

// sampleMemory samples runtime.MemStats every 100ms until stop.
func sampleMemory() *memSampler {
	s := &memSampler{done: make(chan struct{})}
	s.sample()
	s.wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.sample()
			}
		}
	})
	return s
}

func (s *memSampler) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.mu.Lock()
	s.m.PeakHeapAlloc = max(s.m.PeakHeapAlloc, ms.HeapAlloc)
	s.m.PeakHeapInuse = max(s.m.PeakHeapInuse, ms.HeapInuse)
	s.m.PeakSys = max(s.m.PeakSys, ms.Sys)
	s.m.NumGC = ms.NumGC
	s.m.PeakGoroutines = max(s.m.PeakGoroutines, runtime.NumGoroutine())
	s.mu.Unlock()
}

// stop ends the sampling (once) and returns the marks.
func (s *memSampler) stop() memory {
	s.once.Do(func() {
		close(s.done)
		s.wg.Wait()
		s.sample()
		s.m.PeakRSS = peakRSS()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

// peakRSS reads the resident set's high-water mark (Linux); 0 elsewhere.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
