// Package phpguzzle holds the test of the php-guzzle example (worker.php): eight php-cli
// workers whose Guzzle clients share one breaker through one fuseboxd.
package phpguzzle
