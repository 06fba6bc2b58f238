package subnet

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

// TestSender: the first batch goes out though empty, later empty ones do not, and a receiver
// that never takes one leaves Send to ctx.
func TestSender(t *testing.T) {
	out := make(chan []Event, 4)
	s := Sender{Out: out}
	added := []Event{{Type: EventAdded, Lease: Lease{Subnet: netip.MustParsePrefix("10.244.1.0/24")}}}
	for _, evs := range [][]Event{nil, nil, added, {}} {
		if err := s.Send(t.Context(), evs); err != nil {
			t.Fatal(err)
		}
	}
	if len(out) != 2 {
		t.Fatalf("%d batches sent, want the first (empty) and the one with a lease", len(out))
	}
	if first := <-out; len(first) != 0 {
		t.Errorf("first batch %v, want it empty", first)
	}
	if second := <-out; len(second) != 1 {
		t.Errorf("second batch %v, want the lease", second)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	blocked := Sender{Out: make(chan []Event)}
	if err := blocked.Send(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Send to a receiver that takes nothing, ctx done: %v, want context.Canceled", err)
	}
}
