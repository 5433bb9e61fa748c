#!/usr/bin/env python3
"""Cosine ranking with several vectors per tool, scored by the best match (max-sim), on the
catalog registry: the full embedding text (core/src/tools/rank/text.rs), its USE WHEN part, its
keywords, the request description. Cosine only (no fusion, no floors): the top 12 surfaced, as the
`cosine` mode of `keyhole eval`; the single-vector row reproduces that mode.

Usage: scripts/with-services.sh python3 eval/maxsim.py   (KEYHOLE_SERVICES=embedder is enough)
"""
import json, os, hashlib, urllib.request, math
URL=os.environ["KEYHOLE_EMBEDDER_URL"]
tools=[t for t in json.load(open('../shared/catalog/tools.json')) if t.get('plane')=='business']
def emb(model, texts):
    out=[]
    for i in range(0,len(texts),32):
        req=urllib.request.Request(URL+"/v1/embeddings",data=json.dumps({"model":model,"input":texts[i:i+32]}).encode(),headers={"content-type":"application/json"})
        d=json.load(urllib.request.urlopen(req,timeout=600))["data"]
        d.sort(key=lambda x:x["index"]); out+= [x["embedding"] for x in d]
    return out
def norm(v):
    n=math.sqrt(sum(x*x for x in v)) or 1; return [x/n for x in v]
views={}
for t in tools:
    rag=t.get('ragDescription') or t['description']
    kw=", ".join(t.get('ragKeywords') or [])
    full=f"{t['id']}\n{t.get('category') or ''}\n{rag}\nKeywords:{kw}"
    use=rag.split("DO NOT USE WHEN")[0].strip()
    views[t['id']]={"full":full,"use":f"{t['id']}\n{use}","kw":f"{t['id']}\n{kw}","desc":f"{t['id']}\n{t['description']}"}
names=["full","use","kw","desc"]
flat=[(tid,v,views[tid][v]) for tid in views for v in names]
vecs=[norm(x) for x in emb("e5-passage",[f[2] for f in flat])]
V={}
for (tid,v,_),vec in zip(flat,vecs): V.setdefault(tid,{})[v]=vec
def part(i):
    d=hashlib.sha256(b"keyhole-split-v1\0"+i.encode()).digest(); return "check" if int.from_bytes(d[:2],"big")%100<35 else "tune"
for name,path in [("field","../shared/catalog/queries.field.jsonl"),("catalog","../shared/catalog/queries.dev.jsonl")]:
    qs=[json.loads(l) for l in open(path) if l.strip()]
    qv=[norm(v) for v in emb("e5-query",[q["query"] for q in qs])]
    for combo in [("full",),("full","use"),("full","kw"),("full","use","kw"),("full","use","kw","desc")]:
        for p in ["check","tune"]:
            r10=fg=n=0
            for q,v in zip(qs,qv):
                if part(q["id"])!=p: continue
                sc=sorted(((max(sum(a*b for a,b in zip(v,V[t][c])) for c in combo),t) for t in V),reverse=True)
                rank=[t for _,t in sc]
                g=set(q["gold"]); n+=1
                r10+=len(g&set(rank[:10]))/len(g); fg+= g<=set(rank[:12])
            print(name,"+".join(combo),p,n,f"R@10 {r10/n:.3f}",f"full-gold@12 {fg/n:.3f}",flush=True)
