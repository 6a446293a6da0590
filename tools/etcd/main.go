// Command etcd runs the etcd server of the version this module requires; the control-plane
// test tier starts it on loopback.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
