// Package netnstest runs privileged tests in network namespaces of their own.
package netnstest

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// Enter moves the calling goroutine, locked to its thread, into a fresh unnamed network
// namespace until the test ends; without root the test is skipped. Unnamed, the namespace
// vanishes with its last reference (the thread and every socket in it), so a failing or
// killed test leaves nothing behind. Sockets opened meanwhile stay in it whatever goroutine
// uses them later.
func Enter(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to create network namespaces")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("opening the current network namespace: %v", err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		tb.Fatalf("creating a network namespace: %v", err)
	}
	tb.Cleanup(func() {
		ns.Close()
		defer orig.Close()
		if err := netns.Set(orig); err != nil {
			// Stay locked: the runtime then ends the thread with the goroutine instead of
			// reusing a thread that is in the wrong namespace.
			tb.Errorf("returning to the original network namespace: %v", err)
			return
		}
		runtime.UnlockOSThread()
	})
}
