package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/probe"
	"github.com/weftnet/weft/subnet"
)

// fakeOffloader is a device's transmit checksum offload, on when made.
type fakeOffloader struct {
	mu   sync.Mutex
	on   bool
	sets []bool // every SetTxChecksumOffload asked
	fail error
}

func (f *fakeOffloader) TxChecksumOffload(string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.on, nil
}

func (f *fakeOffloader) SetTxChecksumOffload(_ context.Context, _ string, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, on)
	if f.fail != nil {
		return f.fail
	}
	f.on = on
	return nil
}

// offloadRig is a daemon of one overlay family as far as the offload goes, with the Notices
// it gives.
type offloadRig struct {
	d       *daemon
	fp      *familyPath
	dev     *fakeOffloader
	notices []string // reasons
}

// noticeLog is Events that keeps the reasons of the notices and ignores the rest.
type noticeLog struct {
	noEvents
	reasons *[]string
}

func (l noticeLog) Notice(_ bool, reason, _ string) { *l.reasons = append(*l.reasons, reason) }

func newOffloadRig(t *testing.T, mode string) *offloadRig {
	r := &offloadRig{dev: &fakeOffloader{on: true}}
	cfg := DefaultConfig()
	cfg.TxChecksumOffload = mode
	r.d = &daemon{cfg: cfg, log: slog.New(slog.NewTextHandler(testWriter{t}, nil)), m: newMetrics(),
		events: noticeLog{reasons: &r.notices}}
	r.fp = &familyPath{off: &offload{dev: "flannel.1", plane: r.dev},
		transport: probe.New(probe.Config{}, nil, probe.Hooks{}).NewTransport(probe.TransportConfig{}, nil, probe.TransportHooks{}),
		cfg: pathConfig{log: r.d.log, m: r.d.m, events: r.d.events, offload: mode,
			hooks: pathHooks{transport: r.d.transportCounted, pathMTU: r.d.pathMTUCounted}}}
	r.d.paths = families{r.fp}
	r.fp.setUpOffload(context.Background())
	return r
}

// brokenPeer is the peer whose checks the tests make up.
func brokenPeer() probe.Target {
	return probe.Target{Key: "10.244.2.0-24", Addr: netip.MustParseAddr("10.244.2.0")}
}

// tell is the peer's Transport telling its verdict.
func (r *offloadRig) tell(broken bool) {
	r.fp.transportChanged(context.Background(), brokenPeer(), broken)
}

func (r *offloadRig) want(t *testing.T, on bool, sets []bool, notices ...string) {
	t.Helper()
	r.dev.mu.Lock()
	gotOn, gotSets := r.dev.on, slices.Clone(r.dev.sets)
	r.dev.mu.Unlock()
	if gotOn != on || fmt.Sprint(gotSets) != fmt.Sprint(sets) || fmt.Sprint(r.notices) != fmt.Sprint(notices) {
		t.Fatalf("device on %t, sets %v, notices %q; want %t, %v, %q", gotOn, gotSets, r.notices, on, sets, notices)
	}
	if g := counter(r.d.m.offload.WithLabelValues("flannel.1")); g != boolGauge(on) {
		t.Errorf("weft_vxlan_tx_checksum_offload %v; want %v", g, boolGauge(on))
	}
}

// TestOffloadAuto: the signature turns the offload off once, counted and noticed; seen again
// after that, it did not help; the peer passing again says it helped. A device made again
// gets the offload off again.
func TestOffloadAuto(t *testing.T) {
	r := newOffloadRig(t, OffloadAuto)
	r.want(t, true, nil)
	r.tell(true)
	r.want(t, false, []bool{false}, NoticeOffloadOff)
	if n := counter(r.d.m.offloadChanges); n != 1 {
		t.Errorf("weft_vxlan_tx_checksum_offload_changes_total %v; want 1", n)
	}
	st := r.d.paths.offloadStatus()
	if len(st) != 1 || st[0].TxChecksum || !strings.Contains(st[0].Reason, brokenPeer().Key) || st[0].Mode != "auto" {
		t.Errorf("/status offload %+v; want off, for %s", st, brokenPeer().Key)
	}
	r.tell(true) // the recheck: still broken
	r.want(t, false, []bool{false}, NoticeOffloadOff, NoticeOffloadNotHelped)
	r.tell(false)
	r.want(t, false, []bool{false}, NoticeOffloadOff, NoticeOffloadNotHelped, NoticeTransportBack)
	if n := counter(r.d.m.offloadChanges); n != 1 {
		t.Errorf("weft_vxlan_tx_checksum_offload_changes_total %v; want still 1", n)
	}
	r.dev.on = true // deleted and made again
	r.fp.setUpOffload(context.Background())
	r.want(t, false, []bool{false, false}, NoticeOffloadOff, NoticeOffloadNotHelped, NoticeTransportBack)
}

// TestOffloadModes: on turns a device found off on and never off, and only reports; off turns
// it off at start, and the signature then did not help; auto leaves a device found off as it
// is; a failed switch leaves it on and says so.
func TestOffloadModes(t *testing.T) {
	r := newOffloadRig(t, OffloadOn)
	r.tell(true)
	r.want(t, true, nil, NoticeTransportBroken)
	r.dev.on = false
	r.fp.setUpOffload(context.Background()) // as a restart finds it, turned off before
	r.want(t, true, []bool{true}, NoticeTransportBroken)

	r = newOffloadRig(t, OffloadOff)
	r.want(t, false, []bool{false})
	if st := r.d.paths.offloadStatus(); len(st) != 1 || !strings.Contains(st[0].Reason, "--vxlan-tx-checksum-offload=off") {
		t.Errorf("/status offload %+v; want the flag as the reason", st)
	}
	r.tell(true)
	r.want(t, false, []bool{false}, NoticeOffloadNotHelped)

	r = newOffloadRig(t, OffloadAuto)
	r.dev.on = false
	r.fp.setUpOffload(context.Background()) // as a restart finds it
	r.want(t, false, nil)

	r = newOffloadRig(t, OffloadAuto)
	r.dev.fail = errors.New("operation not supported")
	r.tell(true)
	r.want(t, true, []bool{false}, NoticeTransportBroken)
	if n := counter(r.d.m.offloadChanges); n != 0 {
		t.Errorf("weft_vxlan_tx_checksum_offload_changes_total %v after a failed switch; want 0", n)
	}
}

// TestPathMTUNotices: a short path is a warning Notice naming the MTU the peer said it passes
// on; whole again, a normal one.
func TestPathMTUNotices(t *testing.T) {
	r := newOffloadRig(t, OffloadAuto)
	cfg, err := subnet.ParseConfig([]byte(`{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.fp.b, err = backend.NewFor(cfg, backend.Node{Underlay: "eth0", Addr: netip.MustParseAddr("192.0.2.11"), MTU: 1500}, linux.Capabilities(), backend.IPv4); err != nil {
		t.Fatal(err)
	}
	r.fp.cfg.mtu = r.fp.b.MTU()
	var msgs []string
	r.fp.cfg.events = noticeFunc{f: func(warning bool, reason, msg string) {
		msgs = append(msgs, fmt.Sprintf("%t %s %s", warning, reason, msg))
	}}
	r.fp.pathMTUChanged(probe.ShortPath{Target: brokenPeer(), MTU: 1350}, true)
	r.fp.pathMTUChanged(probe.ShortPath{Target: brokenPeer()}, false)
	if len(msgs) != 2 || !strings.HasPrefix(msgs[0], "true "+NoticePathMTUShort+" ") || !strings.Contains(msgs[0], "passes on 1350 bytes") ||
		!strings.Contains(msgs[0], "MTU of 1450 bytes") || !strings.HasPrefix(msgs[1], "false "+NoticePathMTUWhole+" ") {
		t.Errorf("notices %q", msgs)
	}
}

// noticeFunc is Events whose Notices go to a function; it ignores the rest.
type noticeFunc struct {
	noEvents
	f func(warning bool, reason, msg string)
}

func (n noticeFunc) Notice(warning bool, reason, msg string) { n.f(warning, reason, msg) }
