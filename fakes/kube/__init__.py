"""A fake Kubernetes API server with a kubelet, at the wire level, for the tests.

`server.py` and the modules beside it serve the API (REST objects, watch, label selectors,
patches, a scheduler); `kubelet.py` runs scheduled pods as real process trees and serves
exec, attach, logs and port-forward for them. They meet at `kubelet_api.py`.
"""
