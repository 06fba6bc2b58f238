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

	"github.com/weftnet/weft/probe"
	"github.com/weftnet/weft/status"
)

// health is what the daemon's HTTP endpoints report. The main loop writes it, the
// handlers read it. Its lock is held to read or write its fields only, never across I/O, so
// that a handler answers whatever the loop is doing (the peers come from the loop's view).
type health struct {
	cfg     Config
	check   func() error                // the datastore's cheap reachability check; nil when it has none
	probe   func(context.Context) error // asks the datastore whether it answers; nil when it cannot
	metrics *metrics
	peers   func() []status.Peer // the peers, from the loop's last published view; set before serving
	// The overlay probes' summary and their view for /status, when probes run.
	overlay       func() probe.Summary
	overlayStatus func() (*status.Overlay, []status.Unreachable)
	offloadStatus func() []status.Offload // set once the devices are made

	mu            sync.Mutex
	lastBeat      time.Time
	envWritten    bool
	everConverged bool
	lastErr       error
	contested     int       // older peer leases claiming what the own lease claims (backend.Set.Contesting)
	expiration    time.Time // of the own lease; zero: never expires
	ownInStore    bool      // the own lease is in the datastore, as far as the watch says
	synced        bool
	brokenSince   time.Time // the datastore has been unreachable since; zero while reachable
	brokenErr     error
	policy        error // why --network-policy is not enforced as the cluster says; nil when it is, or off
	status        status.Node
}

func newHealth(cfg Config, m *metrics, check func() error, probe func(context.Context) error) *health {
	return &health{cfg: cfg, metrics: m, check: check, probe: probe, lastBeat: time.Now()}
}

func (h *health) update(f func(h *health)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

// probeEvery is how often the datastore is probed (subnet.Prober), and how long a probe may
// wait for its answer: a datastore that stops answering is known within twice this, and
// /readyz says so --datastore-timeout later.
const probeEvery = 2 * time.Second

// watchDatastore samples the datastore's reachability every second (Checker) and probes it
// every probeEvery (Prober), until ctx is done.
func (h *health) watchDatastore(ctx context.Context) {
	if h.check == nil && h.probe == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var probed time.Time
	var probeErr error // the last probe's, until the next
	for {
		now := time.Now()
		var err error
		if h.check != nil {
			err = h.check()
		}
		if h.probe != nil && now.Sub(probed) >= probeEvery {
			pctx, cancel := context.WithTimeout(ctx, probeEvery)
			probed, probeErr = now, h.probe(pctx)
			cancel()
		}
		if err == nil {
			err = probeErr
		}
		h.update(func(h *health) {
			switch {
			case err == nil:
				h.brokenSince, h.brokenErr = time.Time{}, nil
			case h.brokenSince.IsZero():
				// A probe that got no answer was sent when unreachable: from then.
				h.brokenSince, h.brokenErr = now, err
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
	case h.policy != nil:
		return fmt.Errorf("network policy: %v", h.policy)
	case h.contested > 0:
		return fmt.Errorf("%d older peer lease(s) claim this node's subnet, public IP or VTEP MAC: this node is the newcomer, and the other nodes route to the older (weftctl status names them)", h.contested)
	}
	if h.overlay != nil {
		if s := h.overlay(); s.Isolated() {
			return fmt.Errorf("overlay: none of the %d peers probed through the data plane answers: this node's side is the likely fault (weftctl status lists them)", s.Targets)
		}
	}
	return nil
}

func (h *health) statusJSON() status.Node {
	h.mu.Lock()
	st := h.status
	err := h.notReadyLocked()
	overlayStatus, offloadStatus := h.overlayStatus, h.offloadStatus
	h.mu.Unlock()
	st.Ready = err == nil
	if err != nil {
		st.NotReady = err.Error()
	}
	if h.peers != nil {
		st.Peers = h.peers()
	}
	if overlayStatus != nil {
		st.Overlay, st.Unreachable = overlayStatus()
	}
	if offloadStatus != nil {
		st.Offload = offloadStatus()
	}
	return st
}

// httpLimits bound what one client of the health endpoints can hold of weftd: a connection
// that sends its request slowly, or never, or sends a large one, or reads the answer slowly,
// is cut off rather than kept (every endpoint is a GET without a body).
type httpLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeader                     int   // bytes of request line and headers
	maxBody                       int64 // bytes of a request body
}

// defaultHTTPLimits: a scrape of /metrics or /status of 20,000 peers is written well within
// the write timeout.
func defaultHTTPLimits() httpLimits {
	return httpLimits{readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second,
		idle: 60 * time.Second, maxHeader: 16 << 10, maxBody: 1 << 10}
}

// guard answers 405 to anything but GET and HEAD, and 413 to a body longer than max; other
// requests go to next with their body bounded.
func guard(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.ContentLength > max {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}

// serve starts the HTTP endpoints; the returned func stops them.
func (h *health) serve(addr netip.AddrPort, log *slog.Logger, lim httpLimits) (func(), error) {
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
	if h.cfg.DebugPprof {
		mux.HandleFunc("/debug/pprof/{name}", serveProfile)
	}
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("health endpoints on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: guard(mux, lim.maxBody), ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read,
		WriteTimeout: lim.write, IdleTimeout: lim.idle, MaxHeaderBytes: lim.maxHeader,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
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
