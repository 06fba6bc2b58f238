package kubecluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Helm runs helm (the program at helmBin) with the administrator's kubeconfig, inside the
// underlay where the API server's address is, as Kubectl runs kubectl, and returns its
// output. Helm's configuration, cache and data are in home: no repository or plugin of the
// user's takes part.
func (c *Cluster) Helm(ctx context.Context, helmBin, home string, args ...string) (string, error) {
	argv := append(c.net.UnderlayCommand(), append([]string{helmBin, "--kubeconfig=" + c.adminKubeconfig}, args...)...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// localImageValues are the chart's values that name the local weft image (LocalWeftImage),
// the only ones HelmInstallWeft sets.
func localImageValues() string {
	repo, tag, _ := strings.Cut(LocalWeftImage, ":")
	return fmt.Sprintf("image:\n  repository: %s\n  tag: %s\n", repo, tag)
}

// HelmInstallWeft deploys weft as a Helm user does, `helm install weft dist/helm/weft` of
// repo with only the image set to the local one (a values file in work), and waits until
// every node is Ready with NetworkUnavailable False. The images (BaseImages) must have been
// imported.
func (c *Cluster) HelmInstallWeft(ctx context.Context, helmBin, repo, work string) ([]corev1.Node, error) {
	values := filepath.Join(work, "weft-values.yaml")
	if err := os.WriteFile(values, []byte(localImageValues()), 0o644); err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	out, err := c.Helm(ctx, helmBin, filepath.Join(work, "helm"), "install", "weft", filepath.Join(repo, "dist", "helm", "weft"),
		"--values", values)
	if err != nil {
		return nil, err
	}
	c.log.Logf("helm install weft dist/helm/weft --values %s:\n%s", filepath.Base(values), strings.TrimSpace(out))
	return c.waitNetworkReady(ctx, "helm install")
}
