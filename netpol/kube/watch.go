package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/netpol"
)

// Watcher keeps what NetworkPolicy needs of the cluster: its Pods (of every namespace),
// Namespaces and NetworkPolicies, from three client-go informers, each of whose caches keeps
// only what policy reads. A Pod is cached as a record of its name, labels, addresses, node
// and named ports (podRecord), made by the informer's transform as the Pod arrives, so that
// memory grows with the pods' labels, addresses and named ports, not with whole Pods; a
// Namespace as its name and labels; a NetworkPolicy less its managed fields and annotations.
//
// Run runs it; Synced, Changed and Snapshot may be called from any goroutine, before,
// during and after Run.
type Watcher struct {
	log        *slog.Logger
	pods       informer
	namespaces informer
	policies   informer

	ran     atomic.Bool
	synced  chan struct{} // closed once the three first lists are in
	changed chan struct{} // one token: policy's view changed since it was last taken
}

// informer is one kind's cache and the controller that fills it.
type informer struct {
	kind  string // as logs and errors name it: "pods"
	store cache.Store
	ctl   cache.Controller
}

// New makes a Watcher of the cluster whose API server rc reaches, which logs to log. Nothing
// is asked of the API server until Run.
func New(rc *rest.Config, log *slog.Logger) (*Watcher, error) {
	c, err := newClient(rc)
	if err != nil {
		return nil, err
	}
	w := &Watcher{log: log, synced: make(chan struct{}), changed: make(chan struct{}, 1)}
	logger := logr.FromSlogHandler(log.Handler())
	w.pods = newInformer(&logger, "pods", c.pods(), &corev1.Pod{}, trimPod, cache.ResourceEventHandlerFuncs{
		AddFunc: w.podAdded, UpdateFunc: w.podUpdated, DeleteFunc: w.podDeleted,
	})
	w.namespaces = newInformer(&logger, "namespaces", c.namespaces(), &corev1.Namespace{}, trimNamespace,
		cache.ResourceEventHandlerFuncs{
			AddFunc: w.addedOrDeleted, UpdateFunc: w.namespaceUpdated, DeleteFunc: w.addedOrDeleted,
		})
	w.policies = newInformer(&logger, "network policies", c.policies(), &networkingv1.NetworkPolicy{}, trimPolicy,
		cache.ResourceEventHandlerFuncs{
			AddFunc: w.addedOrDeleted, UpdateFunc: w.policyUpdated, DeleteFunc: w.addedOrDeleted,
		})
	return w, nil
}

// newInformer makes the informer of one kind, whose objects are of obj's type, trimmed by
// trim, with h told of every change. The informer streams its first list where the API
// server can (WatchList): each object is trimmed as it comes, rather than a whole list of
// whole objects held at once.
func newInformer(logger *logr.Logger, kind string, lw *cache.ListWatch,
	obj runtime.Object, trim cache.TransformFunc, h cache.ResourceEventHandler) informer {
	store, ctl := cache.NewInformerWithOptions(cache.InformerOptions{
		Logger:        logger,
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, nil),
		ObjectType:    obj,
		Handler:       h,
		Transform:     trim,
	})
	return informer{kind: kind, store: store, ctl: ctl}
}

func (w *Watcher) informers() []informer { return []informer{w.pods, w.namespaces, w.policies} }

// Run runs the informers until ctx ends, and returns once they have stopped. The informers
// retry a failed list or watch as client-go does, for as long as ctx lasts. Run returns nil
// when the first lists were all in before ctx ended, else an error that names the kinds
// still missing and wraps ctx's cause. A Watcher runs once: a second Run returns an error.
func (w *Watcher) Run(ctx context.Context) error {
	if w.ran.Swap(true) {
		return errors.New("netpol watch: Run called again; a Watcher runs once")
	}
	// client-go logs through the context's logger: weft's, not klog's global one.
	ctx = logr.NewContext(ctx, logr.FromSlogHandler(w.log.Handler()))
	var wg sync.WaitGroup
	for _, inf := range w.informers() {
		wg.Go(func() { inf.ctl.RunWithContext(ctx) })
	}
	err := w.waitSynced(ctx)
	wg.Wait()
	return err
}

// waitSynced closes synced once the first list of every informer is in, and the handlers
// have seen all of it, or returns an error when ctx ends first.
func (w *Watcher) waitSynced(ctx context.Context) error {
	for _, inf := range w.informers() {
		select {
		case <-inf.ctl.HasSyncedChecker().Done():
		case <-ctx.Done():
			if missing := w.unsynced(); len(missing) > 0 {
				return fmt.Errorf("netpol watch: the first list of %s is not in: %w", strings.Join(missing, ", "), context.Cause(ctx))
			}
		}
	}
	close(w.synced)
	w.log.Info("netpol watch: listed the cluster", "pods", len(w.pods.store.ListKeys()),
		"namespaces", len(w.namespaces.store.ListKeys()), "networkPolicies", len(w.policies.store.ListKeys()))
	return nil
}

// unsynced names the informers whose first list is not in.
func (w *Watcher) unsynced() []string {
	var kinds []string
	for _, inf := range w.informers() {
		if !inf.ctl.HasSynced() {
			kinds = append(kinds, inf.kind)
		}
	}
	return kinds
}

// Synced is closed once the first lists of pods, namespaces and policies are all in.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Changed has a value once what policy sees (Snapshot) may have changed since the value
// was last taken: after a pod that policy sees, a namespace or a policy is added or deleted,
// a namespace's labels change, a policy's spec changes, or a pod changes as policy sees it
// (its labels, addresses, node or named ports, or whether policy sees it at all). Pods'
// other updates (status conditions, above all) do not count. The channel holds one value:
// a change while one is pending adds nothing, and the watcher never waits for a reader.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

// notify notes that policy's view changed.
func (w *Watcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Snapshot returns the current view, sorted by namespace and name. Pods are those policy
// sees: with at least one address that parses (status.podIPs, or status.podIP; one that
// does not is left out, and logged at debug level once for the pod), not on the host
// network, not Succeeded or Failed; a pod's named ports are those of its containers and
// of its sidecars (init containers that restart always), TCP unless the port says otherwise.
// Namespaces are by name. Policies lack their managed fields and annotations.
//
// The three kinds are read one after the other, not at one instant: a change that falls
// between is followed by a value on Changed. What Snapshot returns shares the caches'
// labels, addresses, ports and policies, which nothing changes: the caller must not change
// them either.
func (w *Watcher) Snapshot() (pods []netpol.Pod, namespaces map[string]netpol.Namespace, policies []*networkingv1.NetworkPolicy) {
	objs := w.pods.store.List()
	pods = make([]netpol.Pod, 0, len(objs))
	for _, obj := range objs {
		if r, ok := obj.(*podRecord); ok && r.seen() {
			pods = append(pods, r.pod())
		}
	}
	slices.SortFunc(pods, func(a, b netpol.Pod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})

	objs = w.namespaces.store.List()
	namespaces = make(map[string]netpol.Namespace, len(objs))
	for _, obj := range objs {
		if ns, ok := obj.(*corev1.Namespace); ok {
			namespaces[ns.Name] = netpol.Namespace{Name: ns.Name, Labels: ns.Labels}
		}
	}

	objs = w.policies.store.List()
	policies = make([]*networkingv1.NetworkPolicy, 0, len(objs))
	for _, obj := range objs {
		if p, ok := obj.(*networkingv1.NetworkPolicy); ok {
			policies = append(policies, p)
		}
	}
	slices.SortFunc(policies, func(a, b *networkingv1.NetworkPolicy) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return pods, namespaces, policies
}

// addedOrDeleted is a namespace or policy added or deleted: either changes the view.
func (w *Watcher) addedOrDeleted(any) { w.notify() }

func (w *Watcher) podAdded(obj any) {
	r, ok := obj.(*podRecord)
	if !ok {
		return
	}
	w.noteBadIP(nil, r)
	if r.seen() {
		w.notify()
	}
}

func (w *Watcher) podUpdated(oldObj, newObj any) {
	old, _ := oldObj.(*podRecord)
	cur, ok := newObj.(*podRecord)
	if !ok {
		return
	}
	w.noteBadIP(old, cur)
	if old == nil || !old.sameView(cur) {
		w.notify()
	}
}

func (w *Watcher) podDeleted(obj any) {
	// A pod deleted while the watch was broken comes as the last state the cache had.
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if r, ok := obj.(*podRecord); ok && !r.seen() {
		return
	}
	w.notify()
}

// noteBadIP logs an address of the pod that does not parse, when the pod's previous record
// old (nil for a new pod) did not have it: pods' statuses are updated often.
func (w *Watcher) noteBadIP(old, cur *podRecord) {
	if cur.badIP != "" && (old == nil || old.badIP != cur.badIP) {
		w.log.Debug("netpol watch: leaving out a pod address that does not parse",
			"pod", cur.Namespace+"/"+cur.Name, "ip", cur.badIP)
	}
}

func (w *Watcher) namespaceUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Namespace)
	cur, ok2 := newObj.(*corev1.Namespace)
	if !ok1 || !ok2 || !maps.Equal(old.Labels, cur.Labels) {
		w.notify()
	}
}

func (w *Watcher) policyUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*networkingv1.NetworkPolicy)
	cur, ok2 := newObj.(*networkingv1.NetworkPolicy)
	if !ok1 || !ok2 || !equality.Semantic.DeepEqual(old.Spec, cur.Spec) {
		w.notify()
	}
}
