package netdev

import (
	"context"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
)

// WatchLinks subscribes to RTNLGRP_LINK of the calling netns and calls
// fire on every new or changed link until ctx ends. When the subscription
// breaks (a full socket buffer drops events) it subscribes again and fires
// once for what it may have missed.
func WatchLinks(ctx context.Context, fire func()) error {
	subscribe := func() (chan netlink.LinkUpdate, error) {
		ch := make(chan netlink.LinkUpdate, 64)
		err := netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{ErrorCallback: func(error) {}})
		return ch, err
	}
	ch, err := subscribe()
	if err != nil {
		return err
	}
	go func() {
		for {
			for u := range ch {
				if u.Header.Type == unix.RTM_NEWLINK {
					fire()
				}
			}
			for ctx.Err() == nil {
				if ch, err = subscribe(); err == nil {
					fire()
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return nil
}

// LinksWithMAC returns the names of the calling netns's links whose MAC
// is mac (compared without case).
func LinksWithMAC(mac string) ([]string, error) {
	links, err := nldump.LinkList(nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		if strings.EqualFold(l.Attrs().HardwareAddr.String(), mac) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}
