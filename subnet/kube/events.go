package kube

import (
	"context"
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftnet/weft/events"
)

// EventComponent is the component that the Events weft posts name as their source and
// reporting controller: the FROM column of `kubectl describe node`.
const EventComponent = "weftd"

// PostEvent implements events.Sink: it creates e as a core/v1 Event about this node's Node
// object, where `kubectl describe node` finds it: in the namespace "default", as the
// kubelet's node events are, regarding the Node by kind, name and the UID last read (the node
// name until one is: the kubelet's own reference, which kubectl looks for too). It needs
// events create, which dist's ClusterRole grants; each Event is a new object (no patch of an
// earlier one), since the caller has already folded what repeats.
func (m *Manager) PostEvent(ctx context.Context, e events.Event) error {
	m.mu.Lock()
	uid := m.uid
	m.mu.Unlock()
	if uid == "" {
		uid = types.UID(m.node)
	}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: m.node + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject:      corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: m.node, UID: uid},
		Reason:              e.Reason,
		Message:             e.Message,
		Type:                e.Type,
		Count:               int32(min(e.Count, math.MaxInt32)),
		FirstTimestamp:      metav1.NewTime(e.First),
		LastTimestamp:       metav1.NewTime(e.Last),
		Source:              corev1.EventSource{Component: EventComponent, Host: m.node},
		ReportingController: EventComponent,
		ReportingInstance:   m.node,
	}
	err := m.nodes.CreateEvent(ctx, ev)
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("kube: post event %s on node %q (weft's ClusterRole lacks events create: apply this release's dist/kubernetes/rbac.yaml): %w", e.Reason, m.node, err)
	}
	if err != nil {
		return fmt.Errorf("kube: post event %s on node %q: %w", e.Reason, m.node, err)
	}
	return nil
}
