package kube

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/netpol"
)

// waitLimit bounds every wait for the API server or the watcher: CI machines are loaded.
const waitLimit = 60 * time.Second

// quiet is how long a change that must not be signalled is given to be.
const quiet = time.Second

var addrEqual = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// fullPod is a Pod as a kubelet and the API server would have it, with much that policy does
// not read.
func fullPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "shop", ResourceVersion: "42", UID: "0b5c1f8e",
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1000)},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-7d4b9"}},
			Finalizers:      []string{"example.com/keep"},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Volumes:  []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			InitContainers: []corev1.Container{
				{Name: "setup", Image: "busybox", Ports: []corev1.ContainerPort{{Name: "setup", ContainerPort: 7000}}},
				{Name: "proxy", Image: "envoy", RestartPolicy: new(corev1.ContainerRestartPolicyAlways),
					Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001, Protocol: corev1.ProtocolTCP}}},
			},
			Containers: []corev1.Container{
				{Name: "app", Image: "shop/web:1.2", Command: []string{"/web"},
					Env: []corev1.EnvVar{{Name: "MODE", Value: "production"}},
					Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
						{ContainerPort: 9090, Protocol: corev1.ProtocolTCP}, // no name: not a named port
						{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
					}},
				{Name: "stats", Image: "exporter",
					Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100}}}, // no protocol: TCP
			},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			HostIP:     "192.168.1.10",
			PodIP:      "10.0.0.5",
			PodIPs:     []corev1.PodIP{{IP: "10.0.0.5"}, {IP: "010.0.0.6"}, {IP: "fd00::5"}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", Ready: true, RestartCount: 3, Image: "shop/web:1.2", ImageID: "sha256:0123"},
			},
		},
	}
}

func TestTrimPod(t *testing.T) {
	obj, err := trimPod(fullPod())
	if err != nil {
		t.Fatal(err)
	}
	got, ok := obj.(*podRecord)
	if !ok {
		t.Fatalf("trimPod made a %T, not a *podRecord", obj)
	}
	// The record is all that is kept: what policy reads, and the resource version that the
	// informer's store compares.
	want := &podRecord{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "42", Labels: map[string]string{"app": "web"}},
		node:       "node-1",
		ips:        []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")},
		ports: []netpol.NamedPort{
			{Name: "http", Protocol: netpol.TCP, Port: 8080},
			{Name: "dns", Protocol: netpol.UDP, Port: 53},
			{Name: "metrics", Protocol: netpol.TCP, Port: 9100},
			{Name: "proxy", Protocol: netpol.TCP, Port: 15001},
		},
		badIP: "010.0.0.6",
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(podRecord{}), addrEqual); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if d := cmp.Diff(got, got.DeepCopyObject(), cmp.AllowUnexported(podRecord{}), addrEqual); d != "" {
		t.Errorf("DeepCopyObject (-orig +copy):\n%s", d)
	}

	// A record goes through the transform again unchanged.
	if again, err := trimPod(got); err != nil || again != got {
		t.Errorf("trimPod(record) = %p, %v; want the record itself %p", again, err, got)
	}
	if _, err := trimPod(&corev1.Node{}); err == nil {
		t.Error("trimPod took a Node")
	}

	// status.podIP, where status.podIPs is empty.
	p := fullPod()
	p.Status.PodIPs = nil
	if r, _ := trimPod(p); !cmp.Equal(r.(*podRecord).ips, []netip.Addr{netip.MustParseAddr("10.0.0.5")}, addrEqual) {
		t.Errorf("pod with podIP only: addresses %v", r.(*podRecord).ips)
	}

	// Pods policy does not see keep their key and resource version only.
	unseen := map[string]func(*corev1.Pod){
		"host network": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"succeeded":    func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded },
		"failed":       func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed },
		"no address":   func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil },
		"bad address":  func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", []corev1.PodIP{{IP: "10.0.0.256"}} },
	}
	for name, change := range unseen {
		p := fullPod()
		change(p)
		obj, err := trimPod(p)
		if err != nil {
			t.Fatal(err)
		}
		r := obj.(*podRecord)
		bare := &podRecord{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "42"}, badIP: r.badIP}
		if diff := cmp.Diff(bare, r, cmp.AllowUnexported(podRecord{}), addrEqual); diff != "" || r.seen() {
			t.Errorf("%s: record (-want +got):\n%s", name, diff)
		}
	}
}

func TestTrimNamespaceAndPolicy(t *testing.T) {
	ns := &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "7", UID: "a1",
			Labels:        map[string]string{"kubernetes.io/metadata.name": "shop", "team": "a"},
			Annotations:   map[string]string{"owner": "someone"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
	got, err := trimNamespace(ns)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "7",
		Labels: map[string]string{"kubernetes.io/metadata.name": "shop", "team": "a"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("namespace (-want +got):\n%s", diff)
	}

	spec := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: new(intstr.FromString("http"))}}}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
	}
	pol := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "9",
			Labels:        map[string]string{"app": "web"},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: *spec.DeepCopy(),
	}
	gotPol, err := trimPolicy(pol)
	if err != nil {
		t.Fatal(err)
	}
	wantPol := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "9", Labels: map[string]string{"app": "web"}},
		Spec:       spec,
	}
	if diff := cmp.Diff(wantPol, gotPol); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
	if _, err := trimNamespace(&corev1.Pod{}); err == nil {
		t.Error("trimNamespace took a Pod")
	}
	if _, err := trimPolicy(&corev1.Pod{}); err == nil {
		t.Error("trimPolicy took a Pod")
	}
}

// TestWatcher runs a Watcher against a kube-apiserver, under the ClusterRole of the package
// comment. There are no kubelets: the test writes the pods' status as one would.
func TestWatcher(t *testing.T) {
	srv := kubetest.Start(t, kubetest.Options{})
	admin, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	grantDocRules(t, admin, srv.Restricted())
	rc := kubetest.FailDenied(t, srv.Restricted())
	// Protobuf first, as weftd's Node client hands its config on (subnet/kube's REST).
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	ctx := context.Background()

	createNamespace(t, admin, "alpha", map[string]string{"team": "a"})
	createNamespace(t, admin, "beta", map[string]string{"team": "b"})
	web := createPod(t, admin, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "alpha", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			InitContainers: []corev1.Container{
				{Name: "setup", Image: "setup", Ports: []corev1.ContainerPort{{Name: "setup", ContainerPort: 7000}}},
				{Name: "proxy", Image: "proxy", RestartPolicy: new(corev1.ContainerRestartPolicyAlways),
					Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001}}},
			},
			Containers: []corev1.Container{
				{Name: "app", Image: "web", Ports: []corev1.ContainerPort{
					{Name: "http", ContainerPort: 8080}, {ContainerPort: 9090},
				}},
				{Name: "stats", Image: "stats", Ports: []corev1.ContainerPort{
					{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolUDP},
				}},
			},
		},
	}, running("10.0.0.5", "fd00::5"))
	host := running("192.168.1.10")
	host.HostIP, host.HostIPs = "192.168.1.10", []corev1.HostIP{{IP: "192.168.1.10"}}
	createPod(t, admin, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "host", Namespace: "alpha"},
		Spec:       corev1.PodSpec{NodeName: "node-1", HostNetwork: true, Containers: []corev1.Container{{Name: "c", Image: "c"}}},
	}, host)
	createPod(t, admin, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "alpha"},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "c"}}},
	}, nil)
	done := running("10.0.0.9")
	done.Phase = corev1.PodSucceeded
	createPod(t, admin, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: "beta"},
		Spec:       corev1.PodSpec{NodeName: "node-2", RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "c"}}},
	}, done)
	denyAll := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-all", Namespace: "alpha",
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if _, err := admin.NetworkingV1().NetworkPolicies("alpha").Create(ctx, denyAll, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	w, err := New(rc, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-ran
	})

	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("first lists", func(t *testing.T) {
		select {
		case <-w.Synced():
		case err := <-ran:
			t.Fatalf("Run ended before the first lists were in: %v", err)
		case <-time.After(waitLimit):
			t.Fatal("the first lists are not in")
		}
		v := snapshot(w)
		wantWeb := netpol.Pod{
			Namespace: "alpha", Name: "web", Labels: map[string]string{"app": "web"}, Node: "node-1",
			IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")},
			Ports: []netpol.NamedPort{
				{Name: "http", Protocol: netpol.TCP, Port: 8080},
				{Name: "metrics", Protocol: netpol.UDP, Port: 9100},
				{Name: "proxy", Protocol: netpol.TCP, Port: 15001},
			},
		}
		// Not host, on the host network; not pending, without an address; not done, finished.
		if diff := cmp.Diff([]netpol.Pod{wantWeb}, v.pods, addrEqual); diff != "" {
			t.Errorf("pods (-want +got):\n%s", diff)
		}
		for name, team := range map[string]string{"alpha": "a", "beta": "b"} {
			want := netpol.Namespace{Name: name, Labels: map[string]string{"kubernetes.io/metadata.name": name, "team": team}}
			if diff := cmp.Diff(want, v.namespaces[name]); diff != "" {
				t.Errorf("namespace %s (-want +got):\n%s", name, diff)
			}
		}
		if len(v.policies) != 1 || v.policies[0].Name != "deny-all" {
			t.Fatalf("policies: %v", names(v.policies))
		}
		if p := v.policies[0]; len(p.Annotations) > 0 || len(p.ManagedFields) > 0 {
			t.Errorf("the policy kept its annotations %v or managed fields %v", p.Annotations, p.ManagedFields)
		}
	})

	step("pod labels", func(t *testing.T) {
		web = updatePod(t, admin, web, func(p *corev1.Pod) { p.Labels["tier"] = "front" })
		waitView(t, w, "web labeled tier=front", func(v view) bool {
			p, ok := v.pod("alpha", "web")
			return ok && p.Labels["tier"] == "front"
		})
	})

	step("status churn", func(t *testing.T) {
		drainChanged(w)
		web.Status.Conditions = append(web.Status.Conditions,
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
		web, err = admin.CoreV1().Pods("alpha").UpdateStatus(ctx, web, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The watcher has the update once its cache has the new resource version.
		waitFor(t, "the cache to have the pod's status update", func() bool {
			obj, ok, _ := w.pods.store.GetByKey("alpha/web")
			return ok && obj.(*podRecord).ResourceVersion == web.ResourceVersion
		})
		select {
		case <-w.Changed():
			t.Error("a status update that policy does not see was signalled")
		case <-time.After(quiet):
		}
	})

	step("pod added", func(t *testing.T) {
		createPod(t, admin, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "beta", Labels: map[string]string{"app": "db"}},
			Spec: corev1.PodSpec{NodeName: "node-2", Containers: []corev1.Container{{Name: "db", Image: "db",
				Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432}}}}},
		}, running("fd00::7"))
		waitView(t, w, "beta/db", func(v view) bool {
			p, ok := v.pod("beta", "db")
			return ok && cmp.Equal(p.IPs, []netip.Addr{netip.MustParseAddr("fd00::7")}, addrEqual) &&
				cmp.Equal(p.Ports, []netpol.NamedPort{{Name: "pg", Protocol: netpol.TCP, Port: 5432}})
		})
	})

	step("pod finished", func(t *testing.T) {
		db, err := admin.CoreV1().Pods("beta").Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		db.Status.Phase = corev1.PodFailed
		if _, err := admin.CoreV1().Pods("beta").UpdateStatus(ctx, db, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitView(t, w, "beta/db gone", func(v view) bool {
			_, ok := v.pod("beta", "db")
			return !ok
		})
	})

	step("pod deleted", func(t *testing.T) {
		if err := admin.CoreV1().Pods("alpha").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
			t.Fatal(err)
		}
		waitView(t, w, "alpha/web gone", func(v view) bool {
			_, ok := v.pod("alpha", "web")
			return !ok
		})
	})

	step("namespace labels", func(t *testing.T) {
		ns, err := admin.CoreV1().Namespaces().Get(ctx, "beta", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ns.Labels["team"] = "b2"
		if _, err := admin.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitView(t, w, "beta labeled team=b2", func(v view) bool { return v.namespaces["beta"].Labels["team"] == "b2" })
	})

	step("namespace added", func(t *testing.T) {
		createNamespace(t, admin, "gamma", nil)
		waitView(t, w, "gamma", func(v view) bool {
			return v.namespaces["gamma"].Labels["kubernetes.io/metadata.name"] == "gamma"
		})
	})

	allowDB := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "allow-db", Namespace: "beta"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
	step("policy added", func(t *testing.T) {
		allowDB, err = admin.NetworkingV1().NetworkPolicies("beta").Create(ctx, allowDB, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitView(t, w, "beta/allow-db", func(v view) bool { return v.policy("beta", "allow-db") != nil })
	})

	step("policy updated", func(t *testing.T) {
		allowDB.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
		}}
		if _, err := admin.NetworkingV1().NetworkPolicies("beta").Update(ctx, allowDB, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitView(t, w, "beta/allow-db with an ingress rule", func(v view) bool {
			p := v.policy("beta", "allow-db")
			return p != nil && len(p.Spec.Ingress) == 1
		})
	})

	step("policy deleted", func(t *testing.T) {
		if err := admin.NetworkingV1().NetworkPolicies("alpha").Delete(ctx, "deny-all", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitView(t, w, "alpha/deny-all gone", func(v view) bool { return v.policy("alpha", "deny-all") == nil })
	})

	step("after Run", func(t *testing.T) {
		before := snapshot(w)
		stop()
		select {
		case err := <-ran:
			ran <- err // for the cleanup
			if err != nil {
				t.Errorf("Run after the first lists: %v", err)
			}
		case <-time.After(waitLimit):
			t.Fatal("Run did not return after its context ended")
		}
		after := snapshot(w)
		if diff := cmp.Diff(before, after, cmp.AllowUnexported(view{}), addrEqual); diff != "" {
			t.Errorf("Snapshot after Run (-before +after):\n%s", diff)
		}
		if _, ok := after.pod("alpha", "web"); ok || after.policy("beta", "allow-db") == nil || after.namespaces["gamma"].Name == "" {
			t.Errorf("Snapshot after Run is not the last view: pods %v, policies %v", after.pods, names(after.policies))
		}
		if err := w.Run(ctx); err == nil {
			t.Error("a second Run did not fail")
		}
	})

	step("first lists fail", func(t *testing.T) {
		// An identity the API server does not know: every list is refused.
		w, err := New(srv.Config("not-a-token"), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		err = w.Run(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "pods") {
			t.Errorf("Run = %v; want an error that names pods and wraps the deadline", err)
		}
		select {
		case <-w.Synced():
			t.Error("Synced is closed")
		default:
		}
	})
}

// grantDocRules gives RestrictedUser a ClusterRole of the rules of the package comment, and
// waits until the API server applies it.
func grantDocRules(t *testing.T, admin kubernetes.Interface, restricted *rest.Config) {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	for line := range strings.Lines(string(src)) {
		if code, ok := strings.CutPrefix(line, "//\t"); ok {
			block = append(block, code)
		}
	}
	var role struct {
		Rules []rbacv1.PolicyRule `json:"rules"`
	}
	if err := yaml.UnmarshalStrict([]byte(strings.Join(block, "")), &role); err != nil || len(role.Rules) == 0 {
		t.Fatalf("the rules of the package comment: %v (%d rules)", err, len(role.Rules))
	}
	ctx := context.Background()
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "weft-netpol"}, Rules: role.Rules}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "weft-netpol"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kubetest.RestrictedUser}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's authorizer learns of the binding from its own watch, a moment later.
	cs, err := kubernetes.NewForConfig(restricted)
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ListOptions{Limit: 1}
	var last error
	deadline := time.Now().Add(waitLimit)
	for {
		_, err1 := cs.CoreV1().Pods("").List(ctx, opts)
		_, err2 := cs.CoreV1().Namespaces().List(ctx, opts)
		_, err3 := cs.NetworkingV1().NetworkPolicies("").List(ctx, opts)
		if last = errors.Join(err1, err2, err3); last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ClusterRole of the package comment does not let the watcher list: %v", last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// view is what Snapshot returns.
type view struct {
	pods       []netpol.Pod
	namespaces map[string]netpol.Namespace
	policies   []*networkingv1.NetworkPolicy
}

func snapshot(w *Watcher) view {
	var v view
	v.pods, v.namespaces, v.policies = w.Snapshot()
	return v
}

func (v view) pod(namespace, name string) (netpol.Pod, bool) {
	for _, p := range v.pods {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return netpol.Pod{}, false
}

func (v view) policy(namespace, name string) *networkingv1.NetworkPolicy {
	for _, p := range v.policies {
		if p.Namespace == namespace && p.Name == name {
			return p
		}
	}
	return nil
}

func names(ps []*networkingv1.NetworkPolicy) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Namespace+"/"+p.Name)
	}
	return s
}

// waitView waits for Changed to fire and Snapshot then to satisfy ok: a change must be
// signalled, not only seen.
func waitView(t *testing.T, w *Watcher, what string, ok func(view) bool) {
	t.Helper()
	limit := time.After(waitLimit)
	for {
		select {
		case <-w.Changed():
			if ok(snapshot(w)) {
				return
			}
		case <-limit:
			v := snapshot(w)
			t.Fatalf("no signalled view with %s; the last: pods %v, policies %v", what, v.pods, names(v.policies))
		}
	}
}

// drainChanged takes a pending value of Changed, if any, once what the watcher had in hand
// has come through.
func drainChanged(w *Watcher) {
	time.Sleep(quiet / 5)
	select {
	case <-w.Changed():
	default:
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", waitLimit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// createNamespace creates a namespace and the service account that pods run as, which
// kube-controller-manager would make.
func createNamespace(t *testing.T, cs kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := cs.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// running is the status a kubelet writes of a running pod with addresses ips.
func running(ips ...string) *corev1.PodStatus {
	st := &corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ips[0]}
	for _, ip := range ips {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	return st
}

// createPod creates p, and writes its status as its kubelet would when st is not nil.
func createPod(t *testing.T, cs kubernetes.Interface, p *corev1.Pod, st *corev1.PodStatus) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st == nil {
		return p
	}
	p.Status = *st
	if p, err = cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}

// updatePod changes p by change, and returns what the API server made of it.
func updatePod(t *testing.T, cs kubernetes.Interface, p *corev1.Pod, change func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	p = p.DeepCopy()
	change(p)
	p, err := cs.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testLogger logs to the test's log while the test runs.
func testLogger(t *testing.T) *slog.Logger {
	lw := &logWriter{t: t}
	t.Cleanup(func() { lw.done.Store(true) })
	return slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type logWriter struct {
	t    *testing.T
	done atomic.Bool
}

func (lw *logWriter) Write(p []byte) (int, error) {
	if !lw.done.Load() {
		lw.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
