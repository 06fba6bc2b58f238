package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/kube"
	"github.com/weftnet/weft/subnet/subnettest"
)

// rbacManifest is the RBAC weft ships; the managers under test run with exactly its role.
const rbacManifest = "../../dist/kubernetes/rbac.yaml"

// cluster is one API server with dist's RBAC applied.
type cluster struct {
	srv   *kubetest.Server
	admin kubernetes.Interface
	weft  *rest.Config // the ServiceAccount of dist/kubernetes/rbac.yaml
	rec   *recorder    // every response the weft identity got
}

func newCluster(t *testing.T, args ...string) *cluster {
	t.Helper()
	srv := kubetest.Start(t, kubetest.Options{Args: args})
	kubetest.Apply(t, srv.Admin(), rbacManifest)
	c := &cluster{srv: srv, admin: clientset(t, srv.Admin()), rec: &recorder{}}
	c.weft = c.rec.wrap(srv.ServiceAccountConfig(t, "kube-flannel", "weft"))
	// A permission missing from the role shows as a 403 somewhere, even where client-go
	// retries it away (the reflector relists on its own).
	t.Cleanup(func() {
		if d := c.rec.deniedRequests(); len(d) > 0 {
			t.Errorf("the API server denied the weft service account:\n%s", strings.Join(d, "\n"))
		}
	})
	return c
}

func clientset(t testing.TB, rc *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// recorder notes the API server's answers to one client.
type recorder struct {
	mu     sync.Mutex
	denied []string
	types  map[string]string // request kind (see kind) -> last response content type
}

func (r *recorder) wrap(rc *rest.Config) *rest.Config {
	rc = rest.CopyConfig(rc)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				r.note(req, resp)
			}
			return resp, err
		})
	})
	return rc
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (r *recorder) note(req *http.Request, resp *http.Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		r.denied = append(r.denied, fmt.Sprintf("%s %s: %s", req.Method, req.URL.RequestURI(), resp.Status))
	}
	if r.types == nil {
		r.types = map[string]string{}
	}
	r.types[kind(req)] = resp.Header.Get("Content-Type")
}

// kind names a request by what it does to nodes: "list", "watch", "get", "patch".
func kind(req *http.Request) string {
	switch {
	case req.Method == http.MethodPatch:
		return "patch"
	case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
		return "watch"
	case strings.HasSuffix(req.URL.Path, "/nodes"):
		return "list"
	}
	return "get"
}

// forgetDenied drops the denials noted so far.
func (r *recorder) forgetDenied() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.denied = nil
}

func (r *recorder) deniedRequests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.denied)
}

func (r *recorder) contentTypes() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for k, v := range r.types {
		out[k] = v
	}
	return out
}

// logBuffer is a logger for one test: lines go to the test's log and can be searched.
type logBuffer struct {
	t    testing.TB
	mu   sync.Mutex
	buf  bytes.Buffer
	done atomic.Bool
}

func testLogger(t testing.TB) (*slog.Logger, *logBuffer) {
	lb := &logBuffer{t: t}
	t.Cleanup(func() { lb.done.Store(true) })
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo})), lb
}

func (lb *logBuffer) Write(p []byte) (int, error) {
	lb.mu.Lock()
	lb.buf.Write(p)
	lb.mu.Unlock()
	if !lb.done.Load() {
		lb.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (lb *logBuffer) contains(s string) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return strings.Contains(lb.buf.String(), s)
}

func writeNetConf(t testing.TB, conf string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "net-conf.json")
	if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// createNode creates a Node as the kubelet would register it and kube-controller-manager
// give it a podCIDR (none when cidrs is empty).
func createNode(t testing.TB, cs kubernetes.Interface, name string, annotations map[string]string, cidrs ...string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if len(cidrs) > 0 {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = cidrs[0], cidrs
	}
	n, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	return n
}

func deleteNode(t testing.TB, cs kubernetes.Interface, name string) {
	t.Helper()
	err := cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete node %s: %v", name, err)
	}
}

// patchNode applies a JSON merge patch to a node, or to its status subresource.
func patchNode(t testing.TB, cs kubernetes.Interface, name string, patch any, sub ...string) {
	t.Helper()
	b, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, b, metav1.PatchOptions{}, sub...); err != nil {
		t.Fatalf("patch node %s with %s: %v", name, b, err)
	}
}

func setAnnotations(t testing.TB, cs kubernetes.Interface, name string, ann map[string]any) {
	t.Helper()
	patchNode(t, cs, name, map[string]any{"metadata": map[string]any{"annotations": ann}})
}

// annotationKeys are the keys of flannel's annotations under prefix.
func annotationKeys(prefix string) (managed, backendType, backendData, publicIP string) {
	return prefix + "/kube-subnet-manager", prefix + "/backend-type", prefix + "/backend-data", prefix + "/public-ip"
}

// peerAnnotations are what a flannel or weft node publishes for attrs.
func peerAnnotations(prefix string, attrs subnet.LeaseAttrs) map[string]string {
	managed, bt, bd, ip := annotationKeys(prefix)
	data := "null"
	if len(attrs.BackendData) > 0 {
		data = string(attrs.BackendData)
	}
	return map[string]string{managed: "true", bt: attrs.BackendType, bd: data, ip: attrs.PublicIP.String()}
}

// watch runs m.Watch and gathers its batches.
type watch struct {
	ch      chan subnet.Batch
	state   map[string]subnet.Lease
	batches int            // whole ones
	events  []subnet.Event // every event after the first whole batch
}

func startWatch(t testing.TB, m subnet.Manager) *watch {
	t.Helper()
	w := &watch{ch: make(chan subnet.Batch, 16), state: map[string]subnet.Lease{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Watch(ctx, w.ch) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("Watch did not return after its context was cancelled")
		}
	})
	return w
}

// next applies one whole batch, and the partial ones before it, failing after timeout. It
// returns their events.
func (w *watch) next(t testing.TB, timeout time.Duration, what string) []subnet.Event {
	t.Helper()
	var evs []subnet.Event
	deadline := time.After(timeout)
	for {
		select {
		case b := <-w.ch:
			if b.Partial && w.batches > 0 {
				t.Errorf("a partial batch after the first whole one")
			}
			if w.batches > 0 {
				w.events = append(w.events, b.Events...)
			}
			for _, ev := range b.Events {
				if ev.Type == subnet.EventAdded {
					w.state[ev.Lease.Key()] = ev.Lease
				} else {
					delete(w.state, ev.Lease.Key())
				}
			}
			evs = append(evs, b.Events...)
			if !b.Partial {
				w.batches++
				return evs
			}
		case <-deadline:
			t.Fatalf("no watch batch with %s within %v; state %v", what, timeout, w.keys())
			return nil
		}
	}
}

// until applies batches until cond holds.
func (w *watch) until(t testing.TB, what string, cond func(map[string]subnet.Lease) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(w.state) {
		w.next(t, max(time.Until(deadline), time.Millisecond), what)
	}
}

// quiet fails if a batch arrives within d.
func (w *watch) quiet(t testing.TB, d time.Duration, why string) {
	t.Helper()
	select {
	case evs := <-w.ch:
		t.Fatalf("%s: got a batch %v", why, evs)
	case <-time.After(d):
	}
}

func (w *watch) keys() []string {
	var out []string
	for k, l := range w.state {
		out = append(out, k+"="+l.Attrs.PublicIP.String())
	}
	slices.Sort(out)
	return out
}

// harness runs the conformance suite on one API server. Each Env has its own annotation
// prefix and node names: the nodes of other Envs carry no annotation under its prefix, so
// they are not its peers, exactly as nodes of another network would not be.
type harness struct {
	c *cluster
	n atomic.Int64
}

type env struct {
	h       *harness
	prefix  string // annotation prefix
	names   string // node name prefix
	netConf string // path of net-conf.json

	mu    sync.Mutex
	cidrs map[string]netip.Prefix // by full node name
}

func (h *harness) Env(t *testing.T, netConf string) subnettest.Env {
	id := h.n.Add(1)
	e := &env{h: h, prefix: fmt.Sprintf("e%d.weft.test", id), names: fmt.Sprintf("e%d-", id),
		netConf: writeNetConf(t, netConf), cidrs: map[string]netip.Prefix{}}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for name := range e.cidrs {
			deleteNode(t, h.c.admin, name)
		}
	})
	return e
}

// ensureNode makes the Node called name exist with podCIDR want, or with a free /24 of
// the suite's network when want is zero and the node is new.
func (e *env) ensureNode(t *testing.T, name string, want netip.Prefix) string {
	t.Helper()
	full := e.names + name
	e.mu.Lock()
	defer e.mu.Unlock()
	have, ok := e.cidrs[full]
	if ok && (!want.IsValid() || want == have) {
		return full
	}
	if ok {
		deleteNode(t, e.h.c.admin, full) // a podCIDR cannot change: register again
	}
	if !want.IsValid() {
		used := map[netip.Prefix]bool{}
		for _, p := range e.cidrs {
			used[p] = true
		}
		for i := 1; ; i++ {
			want = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 42, byte(i), 0}), 24)
			if !used[want] {
				break
			}
		}
	}
	createNode(t, e.h.c.admin, full, nil, want.String())
	e.cidrs[full] = want
	return full
}

func (e *env) manager(t *testing.T, full string) *kube.Manager {
	t.Helper()
	log, _ := testLogger(t)
	m, err := kube.New(kube.Config{REST: e.h.c.weft, AnnotationPrefix: e.prefix, NetConfPath: e.netConf, NodeName: full, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *env) Node(t *testing.T, name string) subnet.Manager {
	return e.manager(t, e.ensureNode(t, name, netip.Prefix{}))
}

// PutPeer publishes the lease as the peer itself would: its weft acquires it.
func (e *env) PutPeer(t *testing.T, name string, l subnet.Lease) {
	full := e.ensureNode(t, name, l.Subnet)
	got, err := e.manager(t, full).Acquire(ctxFor(t), subnet.AcquireRequest{Attrs: l.Attrs})
	if err != nil || !got.SameSubnets(l) {
		t.Fatalf("peer %s acquiring %s: got %s, %v", full, l.Key(), got.Key(), err)
	}
}

// DeletePeer deletes the peer's Node object.
func (e *env) DeletePeer(t *testing.T, name string, l subnet.Lease) {
	full := e.names + name
	deleteNode(t, e.h.c.admin, full)
	e.mu.Lock()
	delete(e.cidrs, full)
	e.mu.Unlock()
}

// Drop loses the lease the way a Kubernetes node can: someone removes its annotations
// (the Node object itself belongs to the kubelet; weft never creates one).
func (e *env) Drop(t *testing.T, l subnet.Lease) {
	e.mu.Lock()
	var full string
	for name, p := range e.cidrs {
		if p == l.Subnet {
			full = name
		}
	}
	e.mu.Unlock()
	if full == "" {
		t.Fatalf("no node holds %s", l.Key())
	}
	managed, bt, bd, ip := annotationKeys(e.prefix)
	setAnnotations(t, e.h.c.admin, full, map[string]any{managed: nil, bt: nil, bd: nil, ip: nil})
}
