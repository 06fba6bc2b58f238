package daemon

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weftnet/weft/events"
	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/netpol"
	npkube "github.com/weftnet/weft/netpol/kube"
	"github.com/weftnet/weft/subnet/kube"
)

// fakePolicyPlane is a PolicyPlane that holds the last rules it was given; it cannot match
// SCTP ports (as HNS, say).
type fakePolicyPlane struct {
	mu    sync.Mutex
	rules *netpol.Rules
}

func (p *fakePolicyPlane) Options() netpol.Options { return netpol.Options{SCTP: false} }

func (p *fakePolicyPlane) Enforce(rules netpol.Rules, _ []netip.Prefix, _ bool) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := p.rules == nil
	p.rules = &rules
	if first {
		return "rules", nil
	}
	return "", nil
}

func (p *fakePolicyPlane) Remove() error { return nil }

func (p *fakePolicyPlane) last() *netpol.Rules {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rules
}

// TestDaemonKubePolicyRefusedEvent: a NetworkPolicy the node's plane cannot enforce as
// written (SCTP ports, on a plane without SCTP) is told as a Warning Event about the policy
// itself, where `kubectl describe networkpolicy` finds it (its namespace, kind, name and UID),
// by the node whose pods it selects, as dist's service accounts with network-policy.yaml; a
// refused policy that selects no pod of the node gets no Event from it.
func TestDaemonKubePolicyRefusedEvent(t *testing.T) {
	k := startKube(t)
	kubetest.Apply(t, k.srv.Admin(), "../dist/kubernetes/network-policy.yaml")
	k.weftd = k.weftIdentity(t)
	ctx := context.Background()
	k.node(t, "self", []string{"10.244.1.0/24"}, nil)
	k.node(t, "other", []string{"10.244.2.0/24"}, nil)

	if _, err := k.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.admin.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ name, node, ip string }{{"web", "self", "10.244.1.5"}, {"db", "other", "10.244.2.5"}} {
		pod, err := k.admin.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": p.name}},
			Spec:       corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c", Image: "c"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.ip, PodIPs: []corev1.PodIP{{IP: p.ip}}}
		if _, err := k.admin.CoreV1().Pods("shop").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sctp := corev1.ProtocolSCTP
	policy := func(name, app string) *networkingv1.NetworkPolicy {
		port := intstr.FromInt32(5000)
		np, err := k.admin.NetworkingV1().NetworkPolicies("shop").Create(ctx, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &sctp, Port: &port}}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return np
	}
	mine, theirs := policy("sctp-web", "web"), policy("sctp-db", "db")

	rec := events.New(events.Options{Interval: time.Second})
	plane := &fakePolicyPlane{}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	w, err := npkube.New(k.weftd, log)
	if err != nil {
		t.Fatal(err)
	}
	k.runWith(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`,
		Deps{Plane: &fakePlane{}, Events: rec, Policy: plane, PolicyWatch: w},
		func(c *Config) { c.NodeName, c.NetworkPolicy = "self", true })

	// about lists the Events about np, as kubectl describe networkpolicy asks for them.
	about := func(np *networkingv1.NetworkPolicy) []corev1.Event {
		t.Helper()
		sel := fields.Set{"involvedObject.kind": "NetworkPolicy", "involvedObject.name": np.Name,
			"involvedObject.namespace": np.Namespace, "involvedObject.uid": string(np.UID)}
		l, err := k.admin.CoreV1().Events(np.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	eventually(t, "a NetworkPolicyRefused Event about shop/sctp-web", func() bool {
		return slices.ContainsFunc(about(mine), func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && e.Reason == NoticePolicyRefused && e.Source.Component == kube.EventComponent &&
				e.ReportingInstance == "self" && e.InvolvedObject.APIVersion == "networking.k8s.io/v1" &&
				strings.Contains(e.Message, "node self") && strings.Contains(e.Message, "SCTP")
		})
	})
	// Both refused, web denied in its ingress as though the policy allowed nothing.
	rules := plane.last()
	if rules == nil || len(rules.Refused) != 2 {
		t.Fatalf("rules enforced: %+v; want both policies refused", rules)
	}
	if web := rules.Pods["shop/web"]; web.Ingress == nil || len(web.Ingress.Allow) != 0 {
		t.Errorf("shop/web's ingress: %+v; want isolated, nothing allowed", web.Ingress)
	}
	// The Event of the other policy would have been posted with the first: none came.
	time.Sleep(2 * time.Second)
	if evs := about(theirs); len(evs) != 0 {
		t.Errorf("node self posted %d Events about shop/sctp-db, which selects none of its pods: %+v", len(evs), evs[0])
	}
}
