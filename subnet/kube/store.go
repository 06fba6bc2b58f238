package kube

import (
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/internal/hashindex"
	"github.com/weftnet/weft/subnet"
)

// peerNode is what the watch keeps of a Node: what a peer's lease is read from, 32 bytes and
// one string that packs the Node's name, podCIDRs and watched annotations, made at its size:
// about 110 bytes for a peer of flannel's or weft's. A corev1.Node trimmed of everything else
// took 1.7 KiB in the cache (the struct alone is most of it), and a kubelet's whole Node
// takes tens of KiB (its status lists the images the node holds). A record of its own
// strings took 310 bytes and the map's slot.
type peerNode struct {
	// client-go's reflector keeps the Nodes of a streamed list in a store of its own until
	// the list ends, as this store's Transformer makes them: records. That store asks each
	// for its key (GetNamespace, GetName below) and its resource version (for its metrics),
	// and client-go may ask for more, so a record is a metav1.Object: the methods it does
	// not override read an empty ObjectMeta that all the records of a store share
	// (nodeStore.meta) and nothing writes.
	*metav1.ObjectMeta

	created int64 // the lease's age: nodeAge
	// The fields, each a 2-byte big-endian length plus one (0: absent) and the value: the
	// name; the number of podCIDRs in one byte, and each (nodeCIDRs); the watched
	// annotations' values (annotations.watched), in order, those in a form compact.go names
	// in that form. A value over subnet.MaxAttrsSize is cut to one byte over, which is
	// refused as it was (jsonValue); names and podCIDRs the API server keeps far shorter.
	data string
}

// GetName is the Node's name.
func (p *peerNode) GetName() string {
	name, _, _ := field(p.data)
	return name
}

// GetNamespace is empty: Nodes are not namespaced.
func (p *peerNode) GetNamespace() string { return "" }

// maxValue is the longest value a record keeps whole: the 2-byte length holds one more than
// it.
const maxValue = subnet.MaxAttrsSize + 1

// maxCIDRs is the most podCIDRs a record keeps: the API server takes two, one per family.
const maxCIDRs = 255

// record makes the record of n.
func (a annotations) record(n *corev1.Node) *peerNode {
	f := recordFields[string]{name: n.Name, cidrs: nodeCIDRs(n)}
	for i, k := range a.watched() {
		f.vals[i], f.has[i] = n.Annotations[k]
	}
	return f.record(nodeAge(n))
}

// recordFields are the fields of a record, as strings of a corev1.Node (annotations.record)
// or as the bytes of its protobuf encoding (nodeDecoder.readNode).
type recordFields[S string | []byte] struct {
	name  S
	cidrs []S
	vals  [numWatched]S // the watched annotations' values (annotations.watched)
	has   [numWatched]bool
}

// record makes the record of f, with created as the lease's age.
func (f *recordFields[S]) record(created int64) *peerNode {
	cidrs := f.cidrs[:min(len(f.cidrs), maxCIDRs)]
	size := 2 + len(f.name) + 1
	for _, c := range cidrs {
		size += 2 + min(len(c), maxValue)
	}
	var forms [numWatched]byte // of the values kept in a compact form (compactOf), else 0
	var payloads [numWatched][10]byte
	for i, v := range f.vals {
		size += 2
		if !f.has[i] {
			continue
		}
		if forms[i], payloads[i] = compactOf(v); forms[i] != 0 {
			size += compactSize(forms[i])
		} else {
			size += min(len(v), maxValue)
		}
	}
	var b strings.Builder
	b.Grow(size) // the one allocation, of the size it takes
	put := func(v S, ok bool) {
		if !ok {
			b.WriteString("\x00\x00")
			return
		}
		v = v[:min(len(v), maxValue)]
		b.WriteByte(byte((len(v) + 1) >> 8))
		b.WriteByte(byte(len(v) + 1))
		switch v := any(v).(type) {
		case string:
			b.WriteString(v)
		case []byte:
			b.Write(v)
		}
	}
	put(f.name, true)
	b.WriteByte(byte(len(cidrs)))
	for _, c := range cidrs {
		put(c, true)
	}
	for i, v := range f.vals {
		if forms[i] == 0 {
			put(v, f.has[i])
			continue
		}
		b.WriteByte(compactBit | forms[i])
		b.WriteByte(0)
		b.Write(payloads[i][:compactSize(forms[i])])
	}
	return &peerNode{created: created, data: b.String()}
}

// field splits the first field off s: its value, whether it is there, and the rest.
func field(s string) (v string, ok bool, rest string) {
	size := int(s[0])<<8 | int(s[1])
	if size == 0 {
		return "", false, s[2:]
	}
	return s[2 : 1+size], true, s[1+size:]
}

// cidrs are the Node's podCIDRs (nodeCIDRs).
func (p *peerNode) cidrs() []string {
	_, _, s := field(p.data)
	cidrs := make([]string, s[0])
	s = s[1:]
	for i := range cidrs {
		cidrs[i], _, s = field(s)
	}
	return cidrs
}

// annotationFields is the part of the record after its podCIDRs.
func (p *peerNode) annotationFields() string {
	_, _, s := field(p.data)
	n := int(s[0])
	s = s[1:]
	for range n {
		_, _, s = field(s)
	}
	return s
}

// lookup reads the watched annotations of the record as a, which made it, names them.
func (p *peerNode) lookup(a annotations) lookup {
	return func(key string) (string, bool) {
		s := p.annotationFields()
		for _, k := range a.watched() {
			if k == key {
				return value(s)
			}
			s = skipValue(s)
		}
		return "", false
	}
}

// value reads the annotation's value that s starts with, which may be in a compact form.
func value(s string) (v string, ok bool) {
	if s[0]&compactBit == 0 {
		v, ok, _ = field(s)
		return v, ok
	}
	form := s[0] &^ compactBit
	return expand(form, s[2:2+compactSize(form)]), true
}

// skipValue is what follows an annotation's value.
func skipValue(s string) string {
	if s[0]&compactBit != 0 {
		return s[2+compactSize(s[0]&^compactBit):]
	}
	_, _, rest := field(s)
	return rest
}

// equal reports whether two records hold the same.
func (p *peerNode) equal(o *peerNode) bool {
	return p.created == o.created && p.data == o.data
}

// nodeStore is the watch's cache, which client-go's reflector fills as it lists and watches
// Nodes: a record of each Node (peerNode) by name, and the names of the nodes whose record
// changed since the watcher last took them. A Node update that changes nothing weft reads (a
// heartbeat, a label) leaves the record as it was and notes nothing.
type nodeStore struct {
	ann  annotations
	meta *metav1.ObjectMeta // empty: see peerNode
	kick chan struct{}      // one token: a node is noted as changed

	mu sync.Mutex
	// The records by name, in an index of 9-byte slots: a Go map's slot holds the name too
	// (24 bytes), and at 65,000 nodes its tables were half full.
	nodes   hashindex.Index[string, *peerNode]
	changed map[string]bool
	listed  chan struct{} // closed by the first Replace: the first list is in (isListed)
}

func newNodeStore(a annotations) *nodeStore {
	return &nodeStore{ann: a, meta: &metav1.ObjectMeta{}, kick: make(chan struct{}, 1), nodes: newRecords(),
		changed: map[string]bool{}, listed: make(chan struct{})}
}

// Transformer makes the records the reflector's own store keeps of a streamed list
// (cache.TransformingStore). Until the first list is in, each record is also filed here as it
// comes, as Add files it: the watcher sends the leases streamed so far as partial batches,
// and the receiver takes them, while the rest streams (65,000 Nodes take the API server 1.1
// to 1.7 s). The Replace that ends the list finds them filed and notes only what differs.
// A relist's stream is not filed: its newcomers would meet, as rivals for their podCIDRs,
// nodes that are gone but not yet removed (Replace removes them).
func (s *nodeStore) Transformer() cache.TransformFunc {
	return func(obj any) (any, error) {
		p, err := s.toRecord(obj)
		if err == nil && !s.isListed() {
			s.file(p)
		}
		return p, err
	}
}

func (s *nodeStore) toRecord(obj any) (*peerNode, error) {
	switch o := obj.(type) {
	case *peerNode:
		return o, nil
	case *nodeEvent:
		o.rec.ObjectMeta = s.meta
		return o.rec, nil
	case *corev1.Node:
		p := s.ann.record(o)
		p.ObjectMeta = s.meta
		return p, nil
	}
	return nil, fmt.Errorf("kube: node watch: a %T, not a Node", obj)
}

// Add is a Node the watch sees created.
func (s *nodeStore) Add(obj any) error { return s.put(obj) }

// Update is a Node the watch sees changed.
func (s *nodeStore) Update(obj any) error { return s.put(obj) }

func (s *nodeStore) put(obj any) error {
	p, err := s.toRecord(obj)
	if err != nil {
		return err
	}
	s.file(p)
	return nil
}

// file keeps p as its node's record, and notes the node if that changes its record.
func (s *nodeStore) file(p *peerNode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.nodes.Get(p.GetName()); ok && old.equal(p) {
		return
	}
	s.nodes.Put(p)
	s.note(p.GetName())
}

// Delete is a Node the watch sees deleted.
func (s *nodeStore) Delete(obj any) error {
	p, err := s.toRecord(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.nodes.Delete(p.GetName()); ok {
		s.note(old.GetName())
	}
	return nil
}

// Replace is a whole list of the Nodes: the first, or a relist after the watch could not
// resume. Only the nodes it changes are noted.
func (s *nodeStore) Replace(list []any, _ string) error {
	fresh := newRecords()
	fresh.Reserve(len(list))
	for _, obj := range list {
		p, err := s.toRecord(obj)
		if err != nil {
			return err
		}
		fresh.Put(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for old := range s.nodes.All() {
		if _, ok := fresh.Get(old.GetName()); !ok {
			s.note(old.GetName())
		}
	}
	for p := range fresh.All() {
		if old, ok := s.nodes.Get(p.GetName()); !ok || !old.equal(p) {
			s.note(p.GetName())
		}
	}
	s.nodes = fresh
	if !s.isListed() {
		close(s.listed)
		s.wake() // the list's whole batch goes out though nothing differs
	}
	return nil
}

// isListed reports whether the first list is in. Whether a take holds all of that list is
// take's to say: read apart from the take, it may be false for a take that then waits for
// the list's Replace, and holds it.
func (s *nodeStore) isListed() bool {
	select {
	case <-s.listed:
		return true
	default:
		return false
	}
}

// Resync does nothing: the reflector runs without a resync period.
func (s *nodeStore) Resync() error { return nil }

// note marks a node as changed; s.mu is held. It must not block the reflector.
func (s *nodeStore) note(name string) {
	s.changed[name] = true
	s.wake()
}

// wake tells the watcher there is something to take, without blocking.
func (s *nodeStore) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// take returns the nodes noted as changed since the last take, and whether the first list
// is in: then they hold all of it. Both are read under the lock Replace notes and closes
// listed under, so a take that waited for a Replace is known to hold its list.
func (s *nodeStore) take() (names map[string]bool, listed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names = s.changed
	s.changed = map[string]bool{}
	return names, s.isListed()
}

// get returns the record of the node called name; nil when there is none.
func (s *nodeStore) get(name string) *peerNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, _ := s.nodes.Get(name)
	return p
}

// newRecords is an empty index of records by name.
func newRecords() hashindex.Index[string, *peerNode] {
	return hashindex.New(hashindex.String, (*peerNode).GetName)
}
