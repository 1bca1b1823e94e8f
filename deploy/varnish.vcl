# Varnish 7 in front of musicd (or of nginx in front of musicd), as the Node service ran.
#
#   varnishd -a :6081 -f /etc/varnish/musicd.vcl -s malloc,1G
#
# Set the backend below to musicd (`listen`) or to nginx (deploy/nginx.conf). What it does:
# * track answers are cached whole; Range requests are answered from the cached object
#   (varnish's own range support), so a seek costs musicd nothing once a track is cached;
# * error answers (4xx, 5xx) are not cached, so a track added or fixed shows at once, and
#   a 503 from a MongoDB outage is never kept;
# * /healthz, /readyz and /metrics always go to musicd (uncached);
# * BAN requests from the `purgers` ACL remove cached URLs matching the regular expression
#   in X-Ban-Url: `musicctl purge` sends them when [http_caches] ban_urls names this
#   varnish, so what Redis forgot, varnish forgets too;
# * the client address reaches musicd in X-Forwarded-For (varnish appends the peer), which
#   musicd believes from its trusted_proxies;
# * signed links ([signing]) are checked by musicd on every request, hit or miss: varnish
#   has no HMAC, so it first asks musicd (the same URL with `X-Musicd-Authorize: 1`, a 204
#   with no body, or musicd's own 403), and only on a 204 restarts into its cache. One
#   track is cached once whatever signature asked for it (the hash leaves out `expires`,
#   `kid`, `sig`, `sid` and `ip`), and an expired, tampered, unknown-key or revoked link,
#   or an unsigned one when signing is required, is never answered from the cache.
#   musicd's 204 is itself cached for that exact signed URL (and, for a link bound to an
#   address, that client) until the link expires (a minute at most), and banned as soon
#   as its session or key is revoked (`musicctl revoke`), so a hit
#   costs a second lookup, not a round trip; the first request of each signature pays one
#   small round trip (no lookup, no file: the signature check only). Without signing,
#   remove the lines from `authorize: begin` to `authorize: end` to save even that.
vcl 4.1;

backend musicd {
    .host = "127.0.0.1";
    .port = "23001";
    .connect_timeout = 2s;
    .first_byte_timeout = 30s;
    .between_bytes_timeout = 30s;
}

acl purgers {
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "BAN") {
        if (client.ip !~ purgers) {
            return (synth(403, "Forbidden"));
        }
        if (!req.http.X-Ban-Url) {
            return (synth(400, "X-Ban-Url required"));
        }
        # On obj.http.* only, so the ban lurker can retire old objects in the background.
        ban("obj.http.X-Musicd-Url ~ " + req.http.X-Ban-Url);
        return (synth(200, "Banned"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    # An absolute-form target (`GET http://host/musicdb/...`) is the same URL as its path:
    # musicd routes it by its path, so varnish must hash and authorize it by its path too.
    if (req.url ~ "^[A-Za-z][A-Za-z0-9+.-]*://") {
        set req.url = regsub(req.url, "^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*", "");
        if (req.url !~ "^/") {
            set req.url = "/" + req.url;
        }
    }
    if (req.url ~ "^/(healthz|readyz|metrics)(\?|$)") {
        return (pass);
    }
    # Tracks do not depend on cookies or credentials.
    unset req.http.Cookie;
    unset req.http.Authorization;
    # authorize: begin. musicd says whether this link may play before any cached copy does.
    # Every cacheable request, whatever its route prefix (they are configurable). musicd's
    # 204 is kept for this exact URL, signature included, until the link expires (a
    # minute at most); a refusal is never kept.
    if (req.restarts == 0) {
        set req.http.X-Musicd-Authorize = "1";
        return (hash);
    }
    # authorize: end
    return (hash);
}

sub vcl_hash {
    if (req.http.X-Musicd-Authorize) {
        # An authorization is for this URL, signature and all; for a link bound to an
        # address, for this client too (musicd checked the address it was asked from).
        hash_data("authorize");
        hash_data(req.url);
        if (req.url ~ "[?&]ip=") {
            hash_data(client.ip);
        }
        return (lookup);
    }
    # The link's signature and binding are not part of the key: one copy per track,
    # whatever signed it and for whom.
    set req.http.X-Musicd-Key = regsuball(req.url, "[?&](expires|kid|sig|sid|ip)=[^&]*", "");
    set req.http.X-Musicd-Key = regsub(req.http.X-Musicd-Key, "^([^?]*)&", "\1?");
    hash_data(req.http.X-Musicd-Key);
    unset req.http.X-Musicd-Key;
    if (req.http.host) {
        hash_data(req.http.host);
    } else {
        hash_data(server.ip);
    }
    return (lookup);
}

sub vcl_backend_response {
    # Kept on the object for bans, removed before delivery. An authorization is kept as
    # `authorize:{url}`: a revocation bans those (`^authorize:…sid=S`), a takedown the
    # track's copy (`^/musicdb/ID`).
    set beresp.http.X-Musicd-Url = bereq.url;
    if (bereq.http.X-Musicd-Authorize) {
        set beresp.http.X-Musicd-Url = "authorize:" + bereq.url;
        # Never served stale: an authorization ends when its link does. (This sub returns
        # before varnish's built-in one, so `no-store` is obeyed here.)
        set beresp.grace = 0s;
        set beresp.keep = 0s;
        if (beresp.http.Cache-Control ~ "no-store" || beresp.ttl <= 0s) {
            set beresp.ttl = 0s;
            set beresp.uncacheable = true;
            return (deliver);
        }
    }
    if (beresp.status >= 400) {
        # Not cached: a hit-for-miss for a moment, so concurrent misses still coalesce.
        set beresp.ttl = 1s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    return (deliver);
}

sub vcl_deliver {
    if (req.http.X-Musicd-Authorize) {
        unset req.http.X-Musicd-Authorize;
        if (resp.status == 204) {
            # Authorized: now the track, from the cache or fetched once.
            return (restart);
        }
        # Refused (403, 400): musicd's answer goes to the client as it is.
    }
    unset resp.http.X-Musicd-Url;
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
