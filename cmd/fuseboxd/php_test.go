package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// needPHP returns the php and phpunit binaries, or skips the test saying why (and fails
// it when CI is set: there the packages are installed by .ci/run).
func needPHP(t *testing.T, tools ...string) map[string]string {
	t.Helper()
	paths := make(map[string]string, len(tools))
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			msg := tool + " not found: apt-get install php-cli php-curl phpunit"
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		paths[tool] = p
	}
	if out, err := exec.Command(paths["php"], "-r", "exit(function_exists('curl_init') ? 0 : 1);").CombinedOutput(); err != nil {
		msg := "php has no curl extension (apt-get install php-curl): " + string(out)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return paths
}

// TestPHPClient runs the PHP client's PHPUnit suite (clients/php) against the built
// fuseboxd, whose config directory the suite writes as the operator would publish.
func TestPHPClient(t *testing.T) {
	bins := needPHP(t, "php", "phpunit")
	d := startBinary(t, nil)
	root, err := filepath.Abs("../../clients/php")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins["phpunit"], "-c", filepath.Join(root, "phpunit.xml"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "FUSEBOX_SOCKET="+d.sock, "FUSEBOX_CONFIG_DIR="+d.dir)
	out, err := cmd.CombinedOutput()
	t.Logf("phpunit:\n%s", out)
	if err != nil {
		t.Fatalf("phpunit: %v", err)
	}
}
