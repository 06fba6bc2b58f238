package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestRetryWait: a second, doubling, and never more than maxRetryWait, so that a node
// started during a datastore outage is at most that late once it ends.
func TestRetryWait(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for n, w := range want {
		if got := retryWait(n); got != w {
			t.Errorf("retryWait(%d) = %v, want %v", n, got, w)
		}
	}
	for n := range 200 {
		if got := retryWait(n); got <= 0 || got > maxRetryWait {
			t.Fatalf("retryWait(%d) = %v, want within (0, %v]", n, got, maxRetryWait)
		}
	}
}

// TestRetryStops: retry returns at once on success or a final error, and with the context's
// error when it ends while waiting.
func TestRetryStops(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tries := 0
	v, err := retry(context.Background(), log, "x", func() (int, bool, error) { tries++; return 7, false, nil })
	if v != 7 || err != nil || tries != 1 {
		t.Errorf("success: %d, %v after %d tries", v, err, tries)
	}
	final := errors.New("final")
	if _, err := retry(context.Background(), log, "x", func() (int, bool, error) { return 0, true, final }); err != final {
		t.Errorf("final error: got %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = retry(ctx, log, "x", func() (int, bool, error) { return 0, false, errors.New("down") })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 900*time.Millisecond {
		t.Errorf("context ended while waiting: %v after %v", err, time.Since(start))
	}
}
