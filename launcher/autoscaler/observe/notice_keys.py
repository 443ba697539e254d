"""Where a node reports the cloud's notice that it takes the node back: a key of Ray's KV
store, NOTICE_PREFIX + the node's id in NOTICE_NAMESPACE, whose value is the reclaim time
(epoch seconds). A provider's watcher on the node writes it (AWS:
launcher/providers/notice_watch.py, which carries these values itself: it runs on nodes
without the launcher); `ray_state` reads and deletes them."""

NOTICE_PREFIX = "launcher/reclaim/"
NOTICE_NAMESPACE = "launcher"
