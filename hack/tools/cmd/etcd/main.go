// Command etcd is the etcd server, built from its Go module so envtest needs no
// downloaded binary. It is the same entry point as upstream's etcd main package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
