"""Controller-side I/O that prepares a run: the site's CA and certificates (tls), the
wheelhouse pip downloads (wheelhouse)."""
