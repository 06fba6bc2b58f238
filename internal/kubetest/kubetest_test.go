package kubetest_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/weftnet/weft/internal/kubetest"
)

func clientset(t *testing.T, rc *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestServer: the administrator may do anything, the restricted user nothing until a
// binding says so, a service account gets what its binding grants, and the server comes
// back after a restart with its data. A token bound to a Secret is refused once the Secret
// is deleted (after the restart, which clears the server's cache of authentications), and
// another token of the account stays good.
func TestServer(t *testing.T) {
	srv := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	admin := clientset(t, srv.Admin())
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin creating a node: %v", err)
	}
	if _, err := clientset(t, srv.Restricted()).CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("restricted user reading a node: %v, want forbidden", err)
	}

	objs := kubetest.Apply(t, srv.Admin(), "../../dist/kubernetes/rbac.yaml")
	if len(objs) != 4 {
		t.Errorf("applied %d objects, want 4", len(objs))
	}
	kubetest.Apply(t, srv.Admin(), "../../dist/kubernetes/rbac.yaml") // again: updates
	sa := clientset(t, srv.ServiceAccountConfig(t, "kube-flannel", "weft"))
	if _, err := sa.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Errorf("service account reading a node: %v", err)
	}
	if _, err := sa.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("service account listing namespaces: %v, want forbidden", err)
	}

	revoked := clientset(t, srv.Config(srv.BoundToken(t, "kube-flannel", "weft", "token-a")))
	kept := clientset(t, srv.Config(srv.BoundToken(t, "kube-flannel", "weft", "token-b")))
	for _, cs := range []kubernetes.Interface{revoked, kept} {
		if _, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
			t.Errorf("service account with a bound token reading a node: %v", err)
		}
	}
	srv.RevokeToken(t, "kube-flannel", "token-a")

	srv.Restart(t)
	if _, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Errorf("node after restart: %v", err)
	}
	if _, err := revoked.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("revoked token reading a node: %v, want unauthorized", err)
	}
	if _, err := kept.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Errorf("the token that was not revoked reading a node: %v", err)
	}
}
