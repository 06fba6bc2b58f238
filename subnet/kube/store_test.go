package kube

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/subnet"
)

func storeAnnotations(t testing.TB) annotations {
	a, err := newAnnotations(DefaultAnnotationPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func storeNode(a annotations, name, cidr, ip string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("u-" + name), ResourceVersion: "7", Labels: map[string]string{"a": "b"},
			CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
			Annotations: map[string]string{a.managed: "true", a.backendType: "vxlan", a.publicIP: ip,
				a.publicIPOverwrite: "192.0.2.99", "node.alpha.kubernetes.io/ttl": "0"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec:   corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}, ProviderID: "x"},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"i"}}}},
	}
}

// TestRecord: a record keeps a Node's name, age, podCIDRs and the watched annotations, an
// absent one apart from an empty one, and nothing else; a value over the limit is cut to one
// byte over it.
func TestRecord(t *testing.T) {
	a := storeAnnotations(t)
	n := storeNode(a, "n1", "10.0.1.0/24", "192.0.2.1")
	n.Annotations[a.backendData] = ""
	n.Annotations[a.backendV6Data] = strings.Repeat("x", 1<<20)
	p := a.record(n)
	get := p.lookup(a)
	for _, c := range []struct {
		key, want string
		ok        bool
	}{
		{a.managed, "true", true}, {a.backendType, "vxlan", true}, {a.publicIP, "192.0.2.1", true},
		{a.backendData, "", true}, {a.publicIPv6, "", false},
		{a.publicIPOverwrite, "", false}, // not watched: read from the own Node only
		{"node.alpha.kubernetes.io/ttl", "", false},
	} {
		if v, ok := get(c.key); v != c.want || ok != c.ok {
			t.Errorf("%s = %q, %v; want %q, %v", c.key, v, ok, c.want, c.ok)
		}
	}
	if v, _ := get(a.backendV6Data); len(v) != subnet.MaxAttrsSize+1 {
		t.Errorf("a 1 MiB value is kept as %d bytes, want %d", len(v), subnet.MaxAttrsSize+1)
	}
	if p.GetName() != "n1" || p.created != n.CreationTimestamp.UnixNano() || !slices.Equal(p.cidrs(), []string{"10.0.1.0/24"}) {
		t.Errorf("record %+v", p)
	}
	old := storeNode(a, "n0", "", "192.0.2.2")
	old.Spec.PodCIDR, old.Spec.PodCIDRs = "10.0.2.0/24", nil
	if got := a.record(old).cidrs(); !slices.Equal(got, []string{"10.0.2.0/24"}) {
		t.Errorf("a Node with spec.podCIDR only: podCIDRs %v", got)
	}
}

// TestNodeStore: the cache notes a node when its record changes, and only then: not for a
// heartbeat or a label, and on a relist only the nodes the list changes.
func TestNodeStore(t *testing.T) {
	a := storeAnnotations(t)
	s := newNodeStore(a)
	// noted takes the nodes noted, which must be want, and says whether the take holds all of
	// the first list.
	noted := func(want ...string) bool {
		t.Helper()
		names, listed := s.take()
		if got := slices.Sorted(maps.Keys(names)); !slices.Equal(got, want) {
			t.Errorf("noted %v, want %v", got, want)
		}
		return listed
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	n1, n2, n3 := storeNode(a, "n1", "10.0.1.0/24", "192.0.2.1"), storeNode(a, "n2", "10.0.2.0/24", "192.0.2.2"), storeNode(a, "n3", "10.0.3.0/24", "192.0.2.3")
	select {
	case <-s.listed:
		t.Fatal("listed before any list")
	default:
	}
	// The first list comes as records, as the reflector's store for a streamed list keeps them.
	tr := s.Transformer()
	r1, err := tr(n1)
	must(err)
	// The reflector's own store keys records as it keys Nodes, and reads their resource
	// version.
	if key, err := cache.MetaNamespaceKeyFunc(r1); err != nil || key != "n1" {
		t.Errorf("key of a record: %q, %v", key, err)
	}
	if rv := r1.(*peerNode).GetResourceVersion(); rv != "" {
		t.Errorf("resource version of a record: %q", rv)
	}
	tmp := cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.WithTransformer(tr))
	must(tmp.Add(n2))
	if got, ok, err := tmp.GetByKey("n2"); err != nil || !ok || got.(*peerNode).GetName() != "n2" {
		t.Errorf("client-go's store with the transformer holds %v, %v, %v", got, ok, err)
	}
	if again, err := tr(r1); err != nil || again != r1 {
		t.Errorf("transforming a record: %v, %v", again, err)
	}
	if _, err := tr(cache.DeletedFinalStateUnknown{Key: "n1"}); err == nil {
		t.Error("a tombstone was taken for a Node")
	}
	// What the stream brought so far is filed, and taken as part of the list.
	if noted("n1", "n2") {
		t.Error("a take before the first list's Replace holds all of the list")
	}
	must(s.Replace([]any{r1, n2}, "10"))
	select {
	case <-s.listed:
	default:
		t.Fatal("not listed after the first list")
	}
	if !noted() {
		t.Error("a take after the first list's Replace does not hold all of it")
	}
	if s.get("n1") == nil || s.get("n3") != nil {
		t.Errorf("cache after the list: n1 %v, n3 %v", s.get("n1"), s.get("n3"))
	}

	beat := n1.DeepCopy()
	beat.Labels["c"] = "d"
	beat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady}}
	beat.Annotations["node.alpha.kubernetes.io/ttl"] = "30"
	beat.ResourceVersion = "11"
	must(s.Update(beat))
	noted()

	moved := n1.DeepCopy()
	moved.Annotations[a.publicIP] = "192.0.2.11"
	must(s.Update(moved))
	must(s.Add(n3))
	noted("n1", "n3")
	select {
	case <-s.kick:
	default:
		t.Error("no kick for the noted nodes")
	}

	must(s.Delete(n3))
	must(s.Delete(n3)) // a deletion the relist already saw
	noted("n3")

	// A relist: n1 unchanged, n2 gone, n3 back.
	must(s.Replace([]any{moved, n3}, "20"))
	noted("n2", "n3")
	if s.get("n2") != nil {
		t.Error("n2 kept after a relist without it")
	}
}
