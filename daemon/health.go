package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// health is what /healthz and /readyz report: the loop's heartbeat, whether subnet.env was
// written and whether the data plane converged.
type health struct {
	mu            sync.Mutex
	resync        time.Duration
	lastBeat      time.Time
	envWritten    bool
	everConverged bool // at least once
	lastErr       error
}

func newHealth(resync time.Duration) *health { return &health{resync: resync, lastBeat: time.Now()} }

func (h *health) beat() {
	h.mu.Lock()
	h.lastBeat = time.Now()
	h.mu.Unlock()
}

func (h *health) setEnvWritten() {
	h.mu.Lock()
	h.envWritten = true
	h.mu.Unlock()
}

func (h *health) converged(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
	if err == nil {
		h.everConverged = true
	}
}

func (h *health) healthz() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The loop wakes at least every resync interval; three missed wake-ups is a stuck loop.
	if since := time.Since(h.lastBeat); since > 3*h.resync+10*time.Second {
		return fmt.Errorf("main loop stuck: no progress for %s", since.Round(time.Second))
	}
	return nil
}

func (h *health) readyz() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.envWritten:
		return errors.New("no lease yet: subnet.env not written")
	case !h.everConverged:
		return errors.New("data plane not converged yet")
	case h.lastErr != nil:
		return fmt.Errorf("last convergence failed: %v", h.lastErr)
	}
	return nil
}

// serve starts the health endpoints; the returned func stops them.
func (h *health) serve(addr netip.AddrPort, log *slog.Logger) (func(), error) {
	mux := http.NewServeMux()
	handle := func(check func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if err := check(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, err)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.HandleFunc("/healthz", handle(h.healthz))
	mux.HandleFunc("/readyz", handle(h.readyz))
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("health endpoints on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health endpoints stopped", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
