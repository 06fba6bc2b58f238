package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EventComponent is the component that the Events weft posts name as their source and
// reporting controller: the FROM column of `kubectl describe node`.
const EventComponent = "weftd"

// PostEvent creates ev as an Event from weftd about this node's Node object, or, when the
// caller has set ev.InvolvedObject, about that object. The caller fills in what the Event says
// (type, reason, message, count, first and last time of the occurrences it folds); PostEvent
// fills in the rest, where kubectl describe finds it. About the Node: the namespace "default",
// as the kubelet's node events are, regarding the Node by kind, name and the UID last read
// (the node name until one is: the kubelet's own reference, which kubectl looks for too).
// About another object: the object's namespace. It needs events create, which dist's
// ClusterRole grants; each Event is a new object (no patch of an earlier one), since the
// caller has already folded what repeats.
func (m *Manager) PostEvent(ctx context.Context, ev *corev1.Event) error {
	if ev.InvolvedObject.Kind != "" {
		ev.ObjectMeta = metav1.ObjectMeta{GenerateName: ev.InvolvedObject.Name + ".", Namespace: ev.InvolvedObject.Namespace}
	} else {
		m.mu.Lock()
		uid := m.uid
		m.mu.Unlock()
		if uid == "" {
			uid = types.UID(m.node)
		}
		ev.ObjectMeta = metav1.ObjectMeta{GenerateName: m.node + ".", Namespace: metav1.NamespaceDefault}
		ev.InvolvedObject = corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: m.node, UID: uid}
	}
	ev.Source = corev1.EventSource{Component: EventComponent, Host: m.node}
	ev.ReportingController, ev.ReportingInstance = EventComponent, m.node
	err := m.nodes.CreateEvent(ctx, ev)
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("kube: post event %s about %s %s/%s from node %q (weft's ClusterRole lacks events create: apply this release's dist/kubernetes/rbac.yaml): %w",
			ev.Reason, ev.InvolvedObject.Kind, ev.Namespace, ev.InvolvedObject.Name, m.node, err)
	}
	if err != nil {
		return fmt.Errorf("kube: post event %s about %s %s/%s from node %q: %w", ev.Reason, ev.InvolvedObject.Kind, ev.Namespace, ev.InvolvedObject.Name, m.node, err)
	}
	return nil
}
