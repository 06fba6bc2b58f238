package kubecluster

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterDomain is the cluster's DNS domain: the kubelets give it to pods as their search
// path's base, CoreDNS serves it.
const ClusterDomain = "cluster.local"

//go:embed coredns.yaml
var corednsManifest string

// DeployCoreDNS deploys the cluster DNS as kubeadm does (coredns.yaml: CoreDNSImage, the
// kube-dns Service at Options.DNSServiceIP, which the kubelets give pods as their
// nameserver) and waits until its Deployment's pods are all Ready. CoreDNS's pods are
// ordinary pods on the pod network: the network plugin (DeployWeft) and the image
// (E2EImages) must be there first.
func (c *Cluster) DeployCoreDNS(ctx context.Context) error {
	tmpl, err := template.New("coredns.yaml").Option("missingkey=error").Parse(corednsManifest)
	if err != nil {
		return fmt.Errorf("kubecluster: coredns.yaml: %w", err)
	}
	var manifest bytes.Buffer
	if err := tmpl.Execute(&manifest, map[string]string{
		"Image": CoreDNSImage, "DNSIP": c.opts.DNSServiceIP.String(), "Domain": ClusterDomain,
	}); err != nil {
		return fmt.Errorf("kubecluster: coredns.yaml: %w", err)
	}
	file := filepath.Join(c.Dir(), "control-plane", "coredns.yaml")
	if err := os.WriteFile(file, manifest.Bytes(), 0o644); err != nil {
		return fmt.Errorf("kubecluster: %w", err)
	}
	out, err := c.Kubectl(ctx, "apply", "-f", file)
	if err != nil {
		return err
	}
	c.log.Logf("kubectl apply -f coredns.yaml:\n%s", strings.TrimSpace(out))
	start := time.Now()
	for {
		d, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		var state string
		switch {
		case err != nil:
			state = err.Error()
		case d.Spec.Replicas == nil:
			state = "no replicas set"
		default:
			want := *d.Spec.Replicas
			if d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
				d.Status.ReadyReplicas == want && d.Status.Replicas == want {
				c.log.Logf("kubecluster: CoreDNS's %d pods Ready %v after the apply", want, time.Since(start).Round(time.Millisecond))
				return nil
			}
			state = fmt.Sprintf("%d of %d pods ready", d.Status.ReadyReplicas, want)
		}
		select {
		case <-ctx.Done():
			if pods, kerr := c.Kubectl(context.Background(), "get", "pods", "-n", "kube-system", "-o", "wide"); kerr == nil {
				c.log.Logf("pods of kube-system:\n%s", pods)
			}
			return fmt.Errorf("kubecluster: CoreDNS not ready: %s: %w", state, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
