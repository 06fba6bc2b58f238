package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/weftnet/weft/status"
)

// health is what the daemon's HTTP endpoints report. The main loop writes it, the
// handlers read it.
type health struct {
	cfg     Config
	check   func() error // the datastore's cheap reachability check; nil when it has none
	metrics *metrics
	peers   func() []status.Peer // the peers, from the daemon's model, when asked; set before serving

	mu            sync.Mutex
	lastBeat      time.Time
	envWritten    bool
	everConverged bool
	lastErr       error
	expiration    time.Time // of the own lease; zero: never expires
	ownInStore    bool      // the own lease is in the datastore, as far as the watch says
	synced        bool
	brokenSince   time.Time // the datastore has been unreachable since; zero while reachable
	brokenErr     error
	status        status.Node
}

func newHealth(cfg Config, m *metrics, check func() error) *health {
	return &health{cfg: cfg, metrics: m, check: check, lastBeat: time.Now()}
}

func (h *health) update(f func(h *health)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

// watchDatastore samples the datastore's reachability every second until ctx is done.
func (h *health) watchDatastore(ctx context.Context) {
	if h.check == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		err := h.check()
		h.update(func(h *health) {
			switch {
			case err == nil:
				h.brokenSince, h.brokenErr = time.Time{}, nil
			case h.brokenSince.IsZero():
				h.brokenSince, h.brokenErr = time.Now(), err
			default:
				h.brokenErr = err
			}
		})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *health) healthz() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The loop wakes at least every resync interval; three missed wake-ups is a stuck loop.
	if since := time.Since(h.lastBeat); since > 3*h.cfg.ResyncInterval+10*time.Second {
		return fmt.Errorf("main loop stuck: no progress for %s", since.Round(time.Second))
	}
	return nil
}

func (h *health) readyz() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notReadyLocked()
}

func (h *health) notReadyLocked() error {
	switch {
	case !h.envWritten:
		return errors.New("no lease yet: subnet.env not written")
	case !h.expiration.IsZero() && time.Now().After(h.expiration):
		return fmt.Errorf("own lease expired at %s", h.expiration.Format(time.RFC3339))
	case h.synced && !h.ownInStore:
		return errors.New("own lease missing from the datastore")
	case !h.brokenSince.IsZero() && time.Since(h.brokenSince) > h.cfg.DatastoreTimeout:
		return fmt.Errorf("datastore unreachable for %s: %v", time.Since(h.brokenSince).Round(time.Second), h.brokenErr)
	case !h.everConverged:
		return errors.New("data plane not converged yet")
	case h.lastErr != nil:
		return fmt.Errorf("last convergence failed: %v", h.lastErr)
	}
	return nil
}

func (h *health) statusJSON() status.Node {
	h.mu.Lock()
	st := h.status
	err := h.notReadyLocked()
	h.mu.Unlock()
	st.Ready = err == nil
	if err != nil {
		st.NotReady = err.Error()
	}
	if h.peers != nil {
		st.Peers = h.peers() // not under h.mu: the daemon's lock is taken first elsewhere
	}
	return st
}

// serve starts the HTTP endpoints; the returned func stops them.
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
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(h.statusJSON())
	})
	mux.Handle("/metrics", promhttp.HandlerFor(h.metrics.reg, promhttp.HandlerOpts{}))
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
