package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Apply creates the objects of a YAML manifest (several documents separated by
// ---), or updates them when they exist, as `kubectl apply` would for these
// kinds: Namespace, ServiceAccount, ClusterRole, ClusterRoleBinding, Role,
// RoleBinding. It returns the objects as decoded, in the manifest's order.
func Apply(t testing.TB, rc *rest.Config, path string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	objs, err := decode(data)
	if err != nil {
		t.Fatalf("kubetest: %s: %v", path, err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatalf("kubetest: client: %v", err)
	}
	ctx := context.Background()
	for _, obj := range objs {
		if err := apply(ctx, cs, obj); err != nil {
			t.Fatalf("kubetest: %s: %v", path, err)
		}
	}
	return objs
}

func decode(data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading document %d: %w", len(out)+1, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding document %d: %w", len(out)+1, err)
		}
		out = append(out, obj)
	}
}

func apply(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Namespace:
		return createOrUpdate(ctx, cs.CoreV1().Namespaces(), o)
	case *corev1.ServiceAccount:
		return createOrUpdate(ctx, cs.CoreV1().ServiceAccounts(o.Namespace), o)
	case *rbacv1.ClusterRole:
		return createOrUpdate(ctx, cs.RbacV1().ClusterRoles(), o)
	case *rbacv1.ClusterRoleBinding:
		return createOrUpdate(ctx, cs.RbacV1().ClusterRoleBindings(), o)
	case *rbacv1.Role:
		return createOrUpdate(ctx, cs.RbacV1().Roles(o.Namespace), o)
	case *rbacv1.RoleBinding:
		return createOrUpdate(ctx, cs.RbacV1().RoleBindings(o.Namespace), o)
	}
	return fmt.Errorf("kind %T is not one Apply knows", obj)
}

// typedClient is what the generated clients of every kind above have in common.
type typedClient[T metav1.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
}

func createOrUpdate[T metav1.Object](ctx context.Context, c typedClient[T], obj T) error {
	_, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
		return nil
	}
	cur, err := c.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get %T %s: %w", obj, obj.GetName(), err)
	}
	obj.SetResourceVersion(cur.GetResourceVersion())
	if _, err := c.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// ServiceAccountConfig returns a client config that authenticates as the
// service account namespace/name with a token from the TokenRequest API, as a
// pod running under that account would.
func (s *Server) ServiceAccountConfig(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	return s.Config(s.serviceAccountToken(t, namespace, name, nil))
}

// BoundToken returns a token of the service account namespace/name from the
// TokenRequest API, bound to a Secret called secret that it creates in the
// same namespace, as a pod's projected token is bound to its pod: the token
// is good while the Secret exists, and RevokeToken ends it.
func (s *Server) BoundToken(t testing.TB, namespace, name, secret string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: namespace}}
	obj, err := s.adminClient(t).CoreV1().Secrets(namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: creating Secret %s/%s to bind a token to: %v", namespace, secret, err)
	}
	return s.serviceAccountToken(t, namespace, name, &authenticationv1.BoundObjectReference{
		Kind: "Secret", APIVersion: "v1", Name: obj.Name, UID: obj.UID,
	})
}

// RevokeToken deletes the Secret that tokens from BoundToken are bound to: the
// API server refuses them from then on. It may still accept one for up to
// 10 s from its cache of successful authentications (kube-apiserver's
// TokenSuccessCacheTTL, which no flag sets); a Restart forgets at once.
func (s *Server) RevokeToken(t testing.TB, namespace, secret string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.adminClient(t).CoreV1().Secrets(namespace).Delete(ctx, secret, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("kubetest: revoking the tokens bound to Secret %s/%s: %v", namespace, secret, err)
	}
}

// serviceAccountToken asks the TokenRequest API for an hour's token of the
// service account namespace/name, bound to the object ref names if it is set.
func (s *Server) serviceAccountToken(t testing.TB, namespace, name string, ref *authenticationv1.BoundObjectReference) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	expiry := int64(3600)
	tr, err := s.adminClient(t).CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, BoundObjectRef: ref}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: token for service account %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// adminClient is a clientset with every permission.
func (s *Server) adminClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(s.Admin())
	if err != nil {
		t.Fatalf("kubetest: client: %v", err)
	}
	return cs
}
