# Whether coordinator.service can start; prints why not. Spliced into the post-install script.
ready() {
    if [ -e /var/lib/coordinator/pki/ca.crt ]; then
        return 0
    fi
    echo "no CA yet: run coordinator init --data-dir /var/lib/coordinator --name HOST_OR_IP"
    return 1
}
