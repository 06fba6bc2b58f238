package daemon

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weftnet/weft/backend"
)

// closingPlane is a fakePlane that counts its Close calls.
type closingPlane struct {
	*fakePlane
	closed atomic.Int32
}

func (p *closingPlane) Close() error {
	p.closed.Add(1)
	return nil
}

// TestRunOwnsThePlanes: Run, the composition root, opens the Platform's planes only for a
// valid config, says that a plane it cannot open is the data plane's fault, and closes both
// planes it opened when it returns.
func TestRunOwnsThePlanes(t *testing.T) {
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	p4, p6 := &closingPlane{fakePlane: &fakePlane{}}, &closingPlane{fakePlane: &fakePlane{}}
	opened := 0
	plat := Platform{
		OpenPlanes: func(*slog.Logger) (backend.Plane, backend.Plane, error) { opened++; return p4, p6, nil },
		DefaultIf:  func() (string, error) { return "", errors.New("no default route here") },
	}
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(t.TempDir(), "subnet.env")
	cfg.HealthzPort, cfg.ProbeInterval = 0, 0
	cfg.EtcdEndpoints = []string{"http://127.0.0.1:1"} // nothing answers there

	bad := cfg
	bad.EtcdEndpoints = nil
	if err := Run(t.Context(), bad, log, plat); err == nil || opened != 0 {
		t.Errorf("Run with no etcd endpoints: %v, planes opened %d times; want an error, and none opened", err, opened)
	}

	failing := plat
	failing.OpenPlanes = func(*slog.Logger) (backend.Plane, backend.Plane, error) {
		return nil, nil, errors.New("netlink: operation not permitted")
	}
	if err := Run(t.Context(), cfg, log, failing); err == nil || !strings.HasPrefix(err.Error(), "data plane: ") {
		t.Errorf("Run with planes that cannot be opened: %v; want a data plane error", err)
	}

	// Stopped before it could read the network config: it returns without an error, and what
	// it opened is closed.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Run(ctx, cfg, log, plat); err != nil {
		t.Errorf("Run stopped: %v", err)
	}
	if opened != 1 || p4.closed.Load() != 1 || p6.closed.Load() != 1 {
		t.Errorf("planes opened %d times, closed %d and %d times; want once each", opened, p4.closed.Load(), p6.closed.Load())
	}
}
