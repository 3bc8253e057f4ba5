# Whether nodeagent.service can start; prints why not. Spliced into the post-install script.
ready() {
    /opt/nodeagent/nodeagent check-config
}
