// Package phpworker holds the test of the php-worker example (worker.php): eight php-cli
// workers sharing one breaker through one fuseboxd.
package phpworker
