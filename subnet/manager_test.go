package subnet

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

// TestSender: partial batches go out before the first whole one, never empty; the first
// whole batch goes out though empty, later empty ones do not, nor does a partial one after
// it; a receiver that never takes one leaves Send to ctx.
func TestSender(t *testing.T) {
	out := make(chan Batch, 8)
	s := Sender{Out: out}
	added := []Event{{Type: EventAdded, Lease: Lease{Subnet: netip.MustParsePrefix("10.244.1.0/24")}}}
	for _, evs := range [][]Event{nil, added} {
		if err := s.SendPartial(t.Context(), evs); err != nil {
			t.Fatal(err)
		}
	}
	for _, evs := range [][]Event{nil, nil, added, {}} {
		if err := s.Send(t.Context(), evs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SendPartial(t.Context(), added); err == nil {
		t.Error("a partial batch after the first whole one was sent")
	}
	want := []struct {
		events  int
		partial bool
	}{{1, true}, {0, false}, {1, false}}
	if len(out) != len(want) {
		t.Fatalf("%d batches sent, want %d: the partial one with a lease, the first whole one (empty), the one with a lease", len(out), len(want))
	}
	for i, w := range want {
		if b := <-out; len(b.Events) != w.events || b.Partial != w.partial {
			t.Errorf("batch %d: %d events, partial %t; want %d, %t", i, len(b.Events), b.Partial, w.events, w.partial)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	blocked := Sender{Out: make(chan Batch)}
	if err := blocked.Send(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Send to a receiver that takes nothing, ctx done: %v, want context.Canceled", err)
	}
}
