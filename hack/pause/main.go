// Command pause is the sandbox ("pause") container of hack/cluster.sh's node: the
// process that holds a pod's namespaces open while its containers come and go. It
// does nothing but wait for SIGTERM or SIGINT, then exits 0, so the node needs no
// image from a registry; hack/cluster.sh builds it into an image with hack/image
// and pins it as containerd's sandbox image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
