// Package pythonworker holds the test of the python-worker example (worker.py): eight
// Python worker processes sharing one breaker through one fuseboxd.
package pythonworker
