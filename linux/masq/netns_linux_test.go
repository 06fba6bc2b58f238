package masq

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
)

// needRoot skips tests that create network namespaces and program nftables.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and nftables tables")
	}
}

// newNetNS creates an anonymous network namespace that lives until the test
// ends (closing its last handle deletes it, even when the test fails).
func newNetNS(t *testing.T) netns.NsHandle {
	t.Helper()
	var ns netns.NsHandle
	err := onLockedThread(func() error {
		orig, err := netns.Get()
		if err != nil {
			return fmt.Errorf("getting the original namespace: %w", err)
		}
		defer orig.Close()
		ns, err = netns.New() // also moves this thread into it
		if err != nil {
			return fmt.Errorf("creating a namespace: %w", err)
		}
		if err := netns.Set(orig); err != nil {
			return errThreadLost{fmt.Errorf("returning to the original namespace: %w", err)}
		}
		return nil
	})
	if err != nil {
		if ns.IsOpen() {
			ns.Close()
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// inNetNS runs fn on a thread inside ns and brings the thread back to the
// namespace it came from. Sockets fn opens stay in ns after it returns.
func inNetNS(ns netns.NsHandle, fn func() error) error {
	return onLockedThread(func() error {
		orig, err := netns.Get()
		if err != nil {
			return fmt.Errorf("getting the original namespace: %w", err)
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("entering namespace %s: %w", ns, err)
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			return errThreadLost{errors.Join(ferr, fmt.Errorf("returning to the original namespace: %w", err))}
		}
		return ferr
	})
}

// errThreadLost marks a thread left in a foreign namespace.
type errThreadLost struct{ error }

func (e errThreadLost) Unwrap() error { return e.error }

// onLockedThread runs fn on a goroutine of its own, locked to its thread.
// When fn could not put the thread back in its namespace the goroutine exits
// still locked, and the runtime then ends the thread instead of reusing it,
// so no other goroutine ever runs in a namespace it did not ask for.
func onLockedThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := fn()
		var lost errThreadLost
		if !errors.As(err, &lost) {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// testLogger writes the Manager's logs to the test log, so failures show
// what it decided.
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newTestManager returns a Manager and a plain Conn for inspection, both in a
// fresh namespace.
func newTestManager(t *testing.T) (*Manager, *nftables.Conn, netns.NsHandle) {
	t.Helper()
	ns := newNetNS(t)
	m, err := NewInNetNS(testLogger(t), int(ns))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	return m, conn, ns
}
