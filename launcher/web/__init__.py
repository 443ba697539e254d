"""`launcher dashboard` without a cluster: a local web page of every cluster this machine
knows (records, live state, the head's timeline, runs). `model` turns them into JSON views
(pure), `history` keeps each cluster's timeline here, `collector` polls running clusters
in the background, `server` serves the page and its JSON."""
