package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

// streamedManager sends the first listing of the Manager it wraps as a datastore that streams
// its listing does (the Kubernetes API): each lease in a partial batch of its own, then,
// once the test releases it, the whole batch that ends the listing (empty: every lease came
// already). Later batches pass as they come.
type streamedManager struct {
	subnet.Manager
	partials chan struct{} // closed once the partial batches are taken
	release  chan struct{}
}

func (m *streamedManager) Watch(ctx context.Context, out chan<- subnet.Batch) error {
	in := make(chan subnet.Batch)
	done := make(chan error, 1)
	go func() { done <- m.Manager.Watch(ctx, in) }()
	first := true
	for {
		select {
		case err := <-done:
			return err
		case b := <-in:
			if !first {
				select {
				case out <- b:
				case <-ctx.Done():
				}
				continue
			}
			first = false
			s := subnet.Sender{Out: out}
			for _, ev := range b.Events {
				if err := s.SendPartial(ctx, []subnet.Event{ev}); err != nil {
					return err
				}
			}
			// The channel is the daemon's, buffered: an empty one has them all taken.
			for len(out) > 0 {
				time.Sleep(time.Millisecond)
			}
			close(m.partials)
			select {
			case <-m.release:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := s.Send(ctx, nil); err != nil {
				return err
			}
		}
	}
}

// TestPartialBatchesWaitForTheWhole: the leases of a streamed listing are taken as they come,
// but nothing is applied until the whole batch that ends the listing: no convergence may
// take a part of the peers for all of them (a full Apply would remove the rest).
func TestPartialBatchesWaitForTheWhole(t *testing.T) {
	cli := vxlanEtcd(t)
	const peers = 3
	for i := range peers {
		putPeer(t, cli, fmt.Sprintf("10.244.%d.0-24", i+1), fmt.Sprintf("192.0.2.%d", 21+i), fmt.Sprintf("0e:00:00:00:00:%02x", i+1))
	}
	sm := &streamedManager{partials: make(chan struct{}), release: make(chan struct{})}
	plane := &fakePlane{mac: backend.MAC{0x0e, 1, 2, 3, 4, 5}}
	port := freePort(t)
	startNodeOn(t, func(log *slog.Logger) subnet.Manager {
		sm.Manager = etcd.New(cli, etcd.Options{Logger: log})
		return sm
	}, t.TempDir(), plane, func(c *Config) { c.HealthzPort = port })
	programmed := func() int {
		t.Helper()
		code, body := get(fmt.Sprintf("http://127.0.0.1:%d/status", port))
		var st status.Node
		if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
			t.Fatalf("/status: %d %v\n%s", code, err, body)
		}
		return len(st.Peers)
	}

	select {
	case <-sm.partials:
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon took no partial batch")
	}
	// Taken, the partial batches would be applied at once if they were to be.
	time.Sleep(300 * time.Millisecond)
	if st, n := plane.last(); n != 0 {
		t.Fatalf("applied %d times (last: %d peers) before the listing's whole batch", n, len(st.peers))
	}
	if n := programmed(); n != 0 {
		t.Errorf("/status shows %d peers programmed before the listing's whole batch", n)
	}
	close(sm.release)
	eventually(t, "the first convergence", func() bool { _, n := plane.last(); return n > 0 })
	plane.mu.Lock()
	first := plane.states[0]
	plane.mu.Unlock()
	if !first.full || len(first.peers) != peers {
		t.Errorf("the first Apply: full %t with %d peers, want a full one with all %d", first.full, len(first.peers), peers)
	}
	eventually(t, "/status to show the peers", func() bool { return programmed() == peers })
}
