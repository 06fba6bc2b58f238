package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/probe"
	"github.com/weftnet/weft/status"
)

// Notice is something an operator should hear of beyond the log and the metrics: what the
// node's Kubernetes events carry (Events.Notice).
type Notice struct {
	Warning bool   // a warning rather than a normal event
	Reason  string // one CamelCase word, as Kubernetes events take it
	Message string
}

// Reasons of the Notices about transmit checksum offload.
const (
	NoticeOffloadOff       = "TxChecksumOffloadOff"        // turned off: a peer showed the signature
	NoticeOffloadNotHelped = "TxChecksumOffloadNotHelping" // off, and a peer shows it still
	NoticeTransportBroken  = "OverlayTransportBroken"      // a peer shows it; the offload is left on
	NoticeTransportBack    = "OverlayTransportRestored"    // the peer passes TCP or UDP again
)

// noticeReasons lists the reasons of every Notice the daemon tells.
func noticeReasons() []string {
	return []string{NoticeOffloadOff, NoticeOffloadNotHelped, NoticeTransportBroken, NoticeTransportBack,
		NoticePathMTUShort, NoticePathMTUWhole, NoticePolicyRefused}
}

// offload is the transmit checksum offload of one family's overlay device, which the family's
// Transport checks decide on (--vxlan-tx-checksum-offload).
type offload struct {
	dev   string
	plane backend.TxChecksumOffloader

	// sw serializes the decisions to switch the offload and the I/O that does it, from the
	// loop and the Transport's goroutines; mu guards the fields, which /status reads and
	// which change under both, so that a reader never waits for the device.
	sw     sync.Mutex
	mu     sync.Mutex
	known  bool   // on has been read
	on     bool   // the device offloads transmit checksums
	auto   bool   // weftd turned it off on its own: a device made again gets it off too
	reason string // why it is off
	cause  string // the peer whose signature made weftd turn it off
}

// newOffload is the offload of dev, nil when there is none to switch: host-gw, or a data
// plane that cannot.
func newOffload(dev *backend.VXLANDevice, plane backend.Plane) *offload {
	pl, ok := plane.(backend.TxChecksumOffloader)
	if dev == nil || !ok {
		return nil
	}
	return &offload{dev: dev.Name, plane: pl}
}

// set changes the fields by f, for the holder of o.sw.
func (o *offload) set(f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f()
}

// setUpOffload brings the device's offload in line with the flag and what weftd decided
// before: at start, and whenever the device is made again. auto leaves a device as it finds it
// (an earlier run may have turned it off for a reason); off, or an earlier decision of this
// run, turns it off; on turns it on.
func (fp *familyPath) setUpOffload(ctx context.Context) {
	o, mode, log := fp.off, fp.cfg.offload, fp.cfg.log
	if o == nil {
		return
	}
	o.sw.Lock()
	defer o.sw.Unlock()
	switch {
	case mode == OffloadOff || o.auto:
		if err := o.plane.SetTxChecksumOffload(ctx, o.dev, false); err != nil {
			log.Error("turning transmit checksum offload off failed", "dev", o.dev, "err", err)
		} else if !o.auto {
			o.set(func() { o.reason = "turned off by --vxlan-tx-checksum-offload=off" })
		}
	case mode == OffloadOn:
		if on, err := o.plane.TxChecksumOffload(o.dev); err == nil && !on {
			if err := o.plane.SetTxChecksumOffload(ctx, o.dev, true); err != nil {
				log.Error("turning transmit checksum offload on failed", "dev", o.dev, "err", err)
			} else {
				log.Info("turned transmit checksum offload on, found off", "dev", o.dev, "mode", OffloadOn)
			}
		}
	}
	on, err := o.plane.TxChecksumOffload(o.dev)
	if err != nil {
		log.Warn("reading transmit checksum offload", "dev", o.dev, "err", err)
		return
	}
	o.set(func() {
		if !on && o.reason == "" {
			o.reason = "found off (by an earlier run of weftd, or by hand)"
		}
		o.known, o.on = true, on
	})
	fp.cfg.m.offload.WithLabelValues(o.dev).Set(boolGauge(on))
	log.Info("transmit checksum offload", "dev", o.dev, "on", on, "mode", mode)
}

// transportChanged acts on what the family's Transport found of peer t: broken (it answers
// ICMP through the tunnel but neither TCP nor UDP) or passing again. Broken, with the offload
// on and the mode auto, the offload goes off and the peer is checked again; broken with the
// offload off already, that did not help.
func (fp *familyPath) transportChanged(ctx context.Context, t probe.Target, broken bool) {
	counted := func() {
		if fp.cfg.hooks.transport != nil {
			fp.cfg.hooks.transport()
		}
	}
	counted()
	o, mode, log, m := fp.off, fp.cfg.offload, fp.cfg.log, fp.cfg.m
	if !broken {
		args := []any{"peer", t.Key, "address", t.Addr}
		msg := fmt.Sprintf("peer %s passes TCP or UDP through the tunnel again", t.Key)
		if o != nil {
			o.mu.Lock()
			if o.auto && o.cause == t.Key {
				msg += "; turning transmit checksum offload off on " + o.dev + " helped"
			}
			o.mu.Unlock()
		}
		log.Info(msg, args...)
		fp.notice(Notice{Reason: NoticeTransportBack, Message: msg})
		return
	}
	what := fmt.Sprintf("peer %s (%s) answers ICMP through the tunnel but neither TCP nor UDP", t.Key, t.Addr)
	if o == nil {
		log.Error(what, "peer", t.Key)
		fp.notice(Notice{Warning: true, Reason: NoticeTransportBroken, Message: what})
		return
	}
	o.sw.Lock()
	defer o.sw.Unlock()
	switch {
	case o.known && !o.on:
		msg := what + ", though transmit checksum offload is off on " + o.dev + ": offload off did not help; something else drops them (a firewall, the peer's side?)"
		log.Error(msg, "dev", o.dev, "peer", t.Key)
		fp.notice(Notice{Warning: true, Reason: NoticeOffloadNotHelped, Message: msg})
	case mode != OffloadAuto:
		msg := what + ": the signature of corrupted checksums; --vxlan-tx-checksum-offload=" + mode + " keeps the offload of " + o.dev + " as it is"
		log.Error(msg, "dev", o.dev, "peer", t.Key)
		fp.notice(Notice{Warning: true, Reason: NoticeTransportBroken, Message: msg})
	default:
		if err := o.plane.SetTxChecksumOffload(ctx, o.dev, false); err != nil {
			log.Error(what+": turning transmit checksum offload off failed", "dev", o.dev, "peer", t.Key, "err", err)
			fp.notice(Notice{Warning: true, Reason: NoticeTransportBroken, Message: fmt.Sprintf("%s: turning transmit checksum offload off on %s failed: %v", what, o.dev, err)})
			return
		}
		o.set(func() {
			o.known, o.on, o.auto, o.cause = true, false, true, t.Key
			o.reason = "turned off by weftd: " + what
		})
		m.offload.WithLabelValues(o.dev).Set(0)
		m.offloadChanges.Inc()
		msg := what + ", the signature of corrupted checksums: turned transmit checksum offload off on " + o.dev + "; checking the peer again"
		log.Warn(msg, "dev", o.dev, "peer", t.Key, "address", t.Addr)
		fp.notice(Notice{Warning: true, Reason: NoticeOffloadOff, Message: msg})
		fp.transport.Recheck(t.Key)
		counted()
	}
}

// brokenPeers lists the family's overlay peers whose transport is broken now; nil when it is
// not checked. Readers may call it.
func (fp *familyPath) brokenPeers() []probe.Target {
	if fp.transport == nil {
		return nil
	}
	return fp.transport.Broken()
}

// offloadStatus is what /status says of the family's overlay device's offload; false when it
// has none to switch. Readers may call it.
func (fp *familyPath) offloadStatus() (status.Offload, bool) {
	o := fp.off
	if o == nil {
		return status.Offload{}, false
	}
	o.mu.Lock()
	so := status.Offload{Device: o.dev, Mode: fp.cfg.offload, TxChecksum: o.on || !o.known}
	if !so.TxChecksum {
		so.Reason = o.reason
	}
	o.mu.Unlock()
	var keys []string
	for _, t := range fp.brokenPeers() {
		keys = append(keys, t.Key)
	}
	switch {
	case len(keys) == 0:
	case !so.TxChecksum:
		so.Problem = "offload off did not help: " + strings.Join(keys, ", ")
	default:
		so.Problem = "ICMP passes through the tunnel, TCP and UDP do not: " + strings.Join(keys, ", ")
	}
	return so, true
}

// transportBroken is how many peers (each family's half apart) show the signature now.
func (fs families) transportBroken() int {
	n := 0
	for _, fp := range fs {
		n += len(fp.brokenPeers())
	}
	return n
}

// offloadStatus is what /status says of the overlay devices' offload.
func (fs families) offloadStatus() []status.Offload {
	var out []status.Offload
	for _, fp := range fs {
		if so, ok := fp.offloadStatus(); ok {
			out = append(out, so)
		}
	}
	return out
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
