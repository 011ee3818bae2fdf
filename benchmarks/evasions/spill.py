"""Spill bytes of a restricted session against its quota (issue 53, item 7): a sort of ~1 GB
under a 64 MiB budget on `accelsql serve --spill-limit 1GiB` (a session may spill a quarter).
Usage: python benchmarks/evasions/spill.py [path/to/accelsql]; prints the outcome, the peak size
of DATA_DIR/tmp (sampled every 0.1 s) and what is left after."""
import os, re, subprocess, sys, threading, time, shutil
import adbc_driver_flightsql.dbapi as flightsql
BIN=sys.argv[1] if len(sys.argv) > 1 else "target/release/accelsql"
import tempfile; base=tempfile.mkdtemp(); d=os.path.join(base, "data")
p=subprocess.Popen([BIN,"serve","--listen","127.0.0.1:0","--data-dir",d,"--restricted","--quiet",
  "--memory-limit","1GiB","--session-memory-limit","64MiB","--spill-limit","1GiB"],stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True)
url=re.match(r"listening: (\S+)",p.stdout.readline()).group(1); tok=re.match(r"token: (\S+)",p.stdout.readline()).group(1)
peak=[0]; stop=[False]
def du():
    while not stop[0]:
        t=0
        for root,_,files in os.walk(os.path.join(d,"tmp")):
            for f in files:
                try: t+=os.path.getsize(os.path.join(root,f))
                except OSError: pass
        peak[0]=max(peak[0],t); time.sleep(0.1)
th=threading.Thread(target=du); th.start()
t0=time.time()
with flightsql.connect(url, db_kwargs={"username":"u","password":tok}, autocommit=True) as c:
    cur=c.cursor()
    try:
        cur.execute("SELECT max(r) FROM (SELECT row_number() OVER (ORDER BY v DESC, s) AS r FROM (SELECT v, repeat('x', 200) AS s FROM generate_series(1, 5000000) t(v)))"); cur.fetchall(); out="ok"
    except Exception as e:
        m=re.search(r"\[([0-9A-Z]{5})\]",str(e)); out=m.group(1) if m else str(e)[:200]
stop[0]=True; th.join(); el=time.time()-t0
left=sum(os.path.getsize(os.path.join(r,f)) for r,_,fs in os.walk(os.path.join(d,"tmp")) for f in fs)
print(f"outcome {out}; spill peak {peak[0]/2**20:.0f} MiB against a session quota of 256 MiB (1 GiB engine); {el:.1f} s; left after: {left} bytes")
p.terminate(); p.wait()
shutil.rmtree(base, ignore_errors=True)
