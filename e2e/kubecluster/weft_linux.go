package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/weftnet/weft/dist/image"
)

// LocalWeftImage is the name the weft image (dist/image, what `make image` builds) is imported
// under; dist/kubernetes/weft.yaml's image is changed to it, and nothing else.
const LocalWeftImage = "weft.local/weft:e2e"

// shippedImage is the image line dist/kubernetes/weft.yaml ships with.
const shippedImage = "image: ghcr.io/weftnet/weft:v0.1.0\n"

// ImportImages imports image archives into every node's containerd.
func (c *Cluster) ImportImages(ctx context.Context, archives ...string) error {
	for _, n := range c.nodes {
		for _, a := range archives {
			if err := n.ImportImage(ctx, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// BaseImages builds the images every cluster needs into work: the pause image and weft's
// image from the module in repo (named LocalWeftImage), and returns their archives.
func BaseImages(ctx context.Context, repo, work string) ([]string, error) {
	pause, err := PauseArchive(ctx, repo, work)
	if err != nil {
		return nil, err
	}
	layoutDir := filepath.Join(work, "weft-layout")
	if _, err := image.Build(ctx, image.Options{ModuleDir: repo, Version: "v0.0.0-e2e", Arches: []string{"amd64"}},
		layoutDir); err != nil {
		return nil, fmt.Errorf("building weft's image: %w", err)
	}
	weft, err := LayoutArchive(layoutDir, LocalWeftImage, work)
	if err != nil {
		return nil, err
	}
	return []string{pause, weft}, nil
}

// WeftManifest writes dist/kubernetes/weft.yaml of repo with only its image changed to
// LocalWeftImage into work, and returns its path.
func WeftManifest(repo, work string) (string, error) {
	manifest, err := os.ReadFile(filepath.Join(repo, "dist", "kubernetes", "weft.yaml"))
	if err != nil {
		return "", fmt.Errorf("kubecluster: %w", err)
	}
	if !strings.Contains(string(manifest), shippedImage) {
		return "", fmt.Errorf("kubecluster: dist/kubernetes/weft.yaml has no %q to replace", shippedImage)
	}
	local := filepath.Join(work, "weft.yaml")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(string(manifest), shippedImage, "image: "+LocalWeftImage+"\n")), 0o644); err != nil {
		return "", fmt.Errorf("kubecluster: %w", err)
	}
	return local, nil
}

// DeployWeft deploys weft as a user does, `kubectl apply -f` of dist/kubernetes's rbac.yaml
// and weft.yaml (WeftManifest's copy), and waits until every node is Ready with
// NetworkUnavailable False. The images (BaseImages) must have been imported.
func (c *Cluster) DeployWeft(ctx context.Context, repo, work string) ([]corev1.Node, error) {
	return c.deployWeft(ctx, repo, work, false)
}

// DeployWeftWithPolicy deploys weft as DeployWeft does, with NetworkPolicy on as README.md
// says to turn it on: network-policy.yaml applied beside rbac.yaml, and weft.yaml's
// commented --network-policy uncommented.
func (c *Cluster) DeployWeftWithPolicy(ctx context.Context, repo, work string) ([]corev1.Node, error) {
	return c.deployWeft(ctx, repo, work, true)
}

// policySwitch is the commented switch of dist/kubernetes/weft.yaml.
const policySwitch = "# - --network-policy\n"

func (c *Cluster) deployWeft(ctx context.Context, repo, work string, policy bool) ([]corev1.Node, error) {
	if err := c.applyWeft(ctx, repo, work, policy); err != nil {
		return nil, err
	}
	return c.waitNetworkReady(ctx, "the apply")
}

// EnableNetworkPolicy turns NetworkPolicy on in a cluster that DeployWeft deployed, as
// README.md says to: `kubectl apply -f` of network-policy.yaml, then of weft.yaml with its
// commented --network-policy uncommented, and waits until the DaemonSet's rolling update is
// done.
func (c *Cluster) EnableNetworkPolicy(ctx context.Context, repo, work string) error {
	if err := c.applyWeft(ctx, repo, work, true); err != nil {
		return err
	}
	out, err := c.Kubectl(ctx, "rollout", "status", "-n", "kube-flannel", "ds/weft", "--timeout=4m")
	if err != nil {
		return fmt.Errorf("kubecluster: the rolling update to --network-policy: %w\n%s", err, out)
	}
	return nil
}

// applyWeft applies dist/kubernetes's rbac.yaml and weft.yaml (WeftManifest's copy), with
// policy on: network-policy.yaml too, and weft.yaml's --network-policy uncommented.
func (c *Cluster) applyWeft(ctx context.Context, repo, work string, policy bool) error {
	local, err := WeftManifest(repo, work)
	if err != nil {
		return err
	}
	files := []string{filepath.Join(repo, "dist", "kubernetes", "rbac.yaml")}
	if policy {
		m, err := os.ReadFile(local)
		if err != nil {
			return fmt.Errorf("kubecluster: %w", err)
		}
		if !strings.Contains(string(m), policySwitch) {
			return fmt.Errorf("kubecluster: dist/kubernetes/weft.yaml has no %q to uncomment", strings.TrimSpace(policySwitch))
		}
		on := strings.Replace(string(m), policySwitch, "- --network-policy\n", 1)
		if err := os.WriteFile(local, []byte(on), 0o644); err != nil {
			return fmt.Errorf("kubecluster: %w", err)
		}
		files = append(files, filepath.Join(repo, "dist", "kubernetes", "network-policy.yaml"))
	}
	for _, f := range append(files, local) {
		out, err := c.Kubectl(ctx, "apply", "-f", f)
		if err != nil {
			return err
		}
		c.log.Logf("kubectl apply -f %s:\n%s", filepath.Base(f), strings.TrimSpace(out))
	}
	return nil
}

// waitNetworkReady waits until every node is NetworkReady and returns the nodes, logging how
// long that took after what (the deployment), or, if it fails, the pods.
func (c *Cluster) waitNetworkReady(ctx context.Context, after string) ([]corev1.Node, error) {
	start := time.Now()
	nodes, err := c.WaitNodes(ctx, NetworkReady)
	if err != nil {
		if out, kerr := c.Kubectl(context.Background(), "get", "pods", "-A", "-o", "wide"); kerr == nil {
			c.log.Logf("pods:\n%s", out)
		}
		return nil, err
	}
	c.log.Logf("kubecluster: every node Ready with NetworkUnavailable False %v after %s", time.Since(start).Round(time.Millisecond), after)
	return nodes, nil
}

// NetworkReady is a WaitNodes condition: the node is Ready and its NetworkUnavailable
// condition is False. Both must be there: the kubelet posts Ready, the network plugin
// NetworkUnavailable, which no one else here sets.
func NetworkReady(n *corev1.Node) error {
	var ready, network *corev1.NodeCondition
	for i, cond := range n.Status.Conditions {
		switch cond.Type {
		case corev1.NodeReady:
			ready = &n.Status.Conditions[i]
		case corev1.NodeNetworkUnavailable:
			network = &n.Status.Conditions[i]
		}
	}
	switch {
	case ready == nil || ready.Status != corev1.ConditionTrue:
		return fmt.Errorf("not Ready: %v", ready)
	case network == nil:
		return errors.New("no NetworkUnavailable condition yet")
	case network.Status != corev1.ConditionFalse:
		return fmt.Errorf("NetworkUnavailable %s: %s", network.Status, network.Message)
	}
	return nil
}
