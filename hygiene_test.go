package signet_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// trackedFiles lists the files git tracks, or skips outside a checkout.
func trackedFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (git ls-files: %v)", err)
	}
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	return files
}

// Issue 14: no build output is tracked — no compiled program (ELF,
// Mach-O, PE: the stale 29 MB signet binary once sat at the root), and
// nothing under the folders builds and tools write.
func TestNoBuildOutputIsTracked(t *testing.T) {
	magics := [][]byte{{0x7f, 'E', 'L', 'F'}, {0xcf, 0xfa, 0xed, 0xfe}, {0xfe, 0xed, 0xfa, 0xcf}, {'M', 'Z'}}
	outputDirs := []string{"bin/", ".aws-sam/", ".tools/", ".schemathesis/", ".signet/", "node_modules/", "sdk/typescript/node_modules/", "sdk/typescript/dist/", "sdk/typescript/build/", "web/console/node_modules/", "web/console/build/", "web/console/test-results/"}
	for _, f := range trackedFiles(t) {
		for _, d := range outputDirs {
			if strings.HasPrefix(f, d) {
				t.Errorf("%s is tracked: %s is build or tool output (.gitignore has it)", f, d)
			}
		}
		fh, err := os.Open(f)
		if err != nil {
			continue // deleted in the working tree
		}
		head := make([]byte, 4)
		n, _ := fh.Read(head)
		fh.Close()
		for _, m := range magics {
			if n >= len(m) && bytes.Equal(head[:len(m)], m) {
				t.Errorf("%s is tracked and is a compiled program", f)
			}
		}
	}
}

// Issue 14: every relative link in the README and docs names a file in
// the repository.
func TestDocLinksNameFilesInTheRepository(t *testing.T) {
	tracked := map[string]bool{}
	for _, f := range trackedFiles(t) {
		tracked[f] = true
		for d := filepath.Dir(f); d != "."; d = filepath.Dir(d) {
			tracked[d] = true
		}
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for f := range tracked {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		text, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Clean(filepath.Join(filepath.Dir(f), target))
			if !tracked[path] {
				t.Errorf("%s links to %s, which is not in the repository", f, m[1])
			}
		}
	}
}
