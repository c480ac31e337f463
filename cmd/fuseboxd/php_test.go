package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// needPHP returns the php and phpunit binaries, or skips the test saying why (and fails
// it when CI is set: there the packages are installed by .ci/run).
func needPHP(t *testing.T) (php, phpunit string) {
	t.Helper()
	const install = "apt-get install php-cli php-curl phpunit php-guzzlehttp-guzzle php-psr-log"
	var err error
	if php, err = exec.LookPath("php"); err != nil {
		skipWithout(t, "php not found: "+install)
	}
	if phpunit, err = exec.LookPath("phpunit"); err != nil {
		skipWithout(t, "phpunit not found: "+install)
	}
	// Guzzle and PSR-3 as Debian installs them, on PHP's include_path.
	probe := `exit(function_exists('curl_init') && stream_resolve_include_path('GuzzleHttp/autoload.php') && stream_resolve_include_path('Psr/Log/autoload.php') ? 0 : 1);`
	if out, err := exec.Command(php, "-r", probe).CombinedOutput(); err != nil {
		skipWithout(t, "php lacks curl, Guzzle or PSR-3 ("+install+"): "+string(out))
	}
	return php, phpunit
}

// TestPHPClient runs the PHP client's PHPUnit suite (clients/php) against the built
// fuseboxd, which the suite starts itself (FUSEBOXD), as often as it needs.
func TestPHPClient(t *testing.T) {
	t.Parallel()
	_, phpunit := needPHP(t)
	runSuite(t, "php", phpunit, "-c", filepath.Join("phpunit.xml"))
}
