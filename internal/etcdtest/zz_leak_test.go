package etcdtest

import (
	"context"
	"runtime"
	"testing"
	"time"
	"os"
	"runtime/pprof"
)

func TestZZLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, tlsOn := range []bool{false, true} {
		t.Run("x", func(t *testing.T) {
			s := Start(t, Options{TLS: tlsOn})
			c := s.Client(t)
			c.Put(context.Background(), "a", "b")
			w := c.Watch(context.Background(), "a")
			_ = w
			s.Restart(t)
			c.Get(context.Background(), "a")
		})
	}
	t0 := time.Now()
	time.Sleep(500 * time.Millisecond)
	after := runtime.NumGoroutine()
	t.Logf("goroutines before %d after %d (%v)", before, after, time.Since(t0))
	if after > before+2 {
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
	}
}
