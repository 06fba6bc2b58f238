package kubecluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/e2e/cluster"
)

// manifestObjects reads a multi-document YAML manifest into its objects, keyed by kind and
// name, with the ConfigMaps' JSON files parsed (their layout means nothing).
func manifestObjects(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]map[string]any{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var obj map[string]any
		if err := yaml.UnmarshalStrict(doc, &obj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if obj == nil {
			continue // comments only
		}
		meta, _ := obj["metadata"].(map[string]any)
		key := obj["kind"].(string) + " " + meta["name"].(string)
		if data, ok := obj["data"].(map[string]any); ok {
			for k, v := range data {
				var parsed any
				if err := json.Unmarshal([]byte(v.(string)), &parsed); err != nil {
					t.Fatalf("%s: %s %s: %v", path, key, k, err)
				}
				data[k] = parsed
			}
		}
		objs[key] = obj
	}
}

// TestKubeFlannelManifest checks that testdata/kube-flannel.yml is flannel v0.28.10's
// Documentation/kube-flannel.yml (from the module tools/flannel builds flanneld from) but for
// the differences its comment names: the images, and cni-conf.json's cniVersion.
func TestKubeFlannelManifest(t *testing.T) {
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/flannel-io/flannel")
	cmd.Dir = filepath.Join(repo, "tools", "flannel")
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("flannel's module, for its kube-flannel.yml: go mod download: %v", err)
	}
	var mod struct{ Dir, Version string }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Version != flannelVersion {
		t.Fatalf("tools/flannel pins flannel %s, the manifest is %s's", mod.Version, flannelVersion)
	}
	upstream := manifestObjects(t, filepath.Join(mod.Dir, "Documentation", "kube-flannel.yml"))
	ours := manifestObjects(t, FlannelManifest(repo))

	// The differences, made to upstream's.
	images := map[string]string{
		"ghcr.io/flannel-io/flannel:" + flannelVersion:          LocalFlannelImage,
		"ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3": LocalFlannelCNIImage,
	}
	spec := upstream["DaemonSet kube-flannel-ds"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	replaced := 0
	for _, list := range []string{"initContainers", "containers"} {
		for _, c := range spec[list].([]any) {
			c := c.(map[string]any)
			local, ok := images[c["image"].(string)]
			if !ok {
				t.Fatalf("upstream's %s %s: image %s, not one the test knows", list, c["name"], c["image"])
			}
			c["image"] = local
			replaced++
		}
	}
	if replaced != 3 {
		t.Fatalf("upstream's DaemonSet has %d containers, the test knows of 3", replaced)
	}
	cni := upstream["ConfigMap kube-flannel-cfg"]["data"].(map[string]any)["cni-conf.json"].(map[string]any)
	if cni["cniVersion"] != "1.0.0" {
		t.Fatalf("upstream's cni-conf.json: cniVersion %v, the test knows 1.0.0", cni["cniVersion"])
	}
	cni["cniVersion"] = "0.4.0"

	for key, want := range upstream {
		if got, ok := ours[key]; !ok {
			t.Errorf("%s: missing", key)
		} else if !reflect.DeepEqual(got, want) {
			g, _ := json.MarshalIndent(got, "", " ")
			w, _ := json.MarshalIndent(want, "", " ")
			t.Errorf("%s differs from upstream's beyond the known differences:\n%s\nwant:\n%s", key, g, w)
		}
	}
	for key := range ours {
		if _, ok := upstream[key]; !ok {
			t.Errorf("%s: not upstream's", key)
		}
	}
}
