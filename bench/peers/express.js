// The seed's service, rewritten without its packages (none are installed here): an id
// looked up (a map loaded at start stands in for mongoose's findById), then the file
// streamed with Range support, as express's res.sendFile does. One process, like the
// seed under forever.
const http = require("http");
const fs = require("fs");
const [port, mapFile] = process.argv.slice(2);
const paths = JSON.parse(fs.readFileSync(mapFile, "utf8"));
http.createServer((req, res) => {
  const m = /^\/musicdb\/([0-9a-f]{24})(\/|$)/.exec(req.url);
  const path = m && paths[m[1]];
  if (!path) { res.writeHead(200); res.end("no file"); return; }
  fs.stat(path, (err, st) => {
    if (err) { res.writeHead(404); res.end(); return; }
    let start = 0, end = st.size - 1, status = 200;
    const range = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range || "");
    if (range) {
      if (range[1] !== "") start = Number(range[1]);
      if (range[2] !== "") end = Math.min(Number(range[2]), st.size - 1);
      if (range[1] === "" && range[2] !== "") { start = st.size - Number(range[2]); end = st.size - 1; }
      if (start > end) { res.writeHead(416, { "Content-Range": `bytes */${st.size}` }); res.end(); return; }
      status = 206;
    }
    const headers = { "Content-Type": "audio/mpeg", "Accept-Ranges": "bytes", "Content-Length": end - start + 1 };
    if (status === 206) headers["Content-Range"] = `bytes ${start}-${end}/${st.size}`;
    res.writeHead(status, headers);
    if (req.method === "HEAD") { res.end(); return; }
    fs.createReadStream(path, { start, end }).pipe(res);
  });
}).listen(Number(port), "127.0.0.1");
