package buildinfo

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestTagsLeaveTraceOut checks that weftd built with Tags links neither golang.org/x/net/trace
// nor html/template: grpc names the tag that leaves them out, and a grpc that renamed it, or a
// new dependency that brought them back, would put the methods the linker then keeps back
// into every binary.
func TestTagsLeaveTraceOut(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list weftd's dependencies with")
	}
	cmd := exec.Command(goBin, "list", "-deps", "-tags="+Tags, "github.com/weftnet/weft/cmd/weftd")
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -tags=%s: %v", Tags, err)
	}
	have := strings.Fields(string(out))
	for _, pkg := range []string{"golang.org/x/net/trace", "html/template"} {
		if slices.Contains(have, pkg) {
			t.Errorf("weftd built with -tags=%s links %s", Tags, pkg)
		}
	}
}

// TestMakefileTags checks that the Makefile builds weft's programs with Tags.
func TestMakefileTags(t *testing.T) {
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TAGS\s*:=\s*(\S*)\s*$`).FindSubmatch(data)
	if m == nil || string(m[1]) != Tags {
		t.Fatalf("the Makefile's TAGS is %q, want %q (buildinfo.Tags)", m, Tags)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "build") && regexp.MustCompile(`\./cmd/(weftd|weftctl|weft)\b`).MatchString(line) &&
			!strings.Contains(line, "-tags=$(TAGS)") {
			t.Errorf("the Makefile builds one of weft's programs without -tags=$(TAGS): %s", strings.TrimSpace(line))
		}
	}
}
