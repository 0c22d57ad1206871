const Database = require('better-sqlite3');
const fs=require('fs'); const os=require('os'); const path=require('path');
function run(label, setup) {
  const dir=fs.mkdtempSync(path.join(os.tmpdir(),'sq-')); const db=new Database(path.join(dir,'x.db'));
  db.pragma('journal_mode = WAL'); db.pragma('synchronous = NORMAL'); setup && setup(db);
  db.exec(`CREATE TABLE t (id TEXT PRIMARY KEY, doc TEXT NOT NULL)`);
  db.exec(`CREATE INDEX ti ON t (json_extract(doc,'$.tenantId'), json_extract(doc,'$.createdAt'), id)`);
  const ins=db.prepare('INSERT INTO t (id, doc) VALUES (?, ?)');
  const N=5000; const t0=process.hrtime.bigint(); let commitNs=0n;
  for(let i=0;i<N;i++){ db.exec('BEGIN IMMEDIATE'); ins.run('prj_'+String(i).padStart(10,'0')+Math.random(), JSON.stringify({tenantId:'ten_'+(i%3),name:'project '+i,description:'a project',createdAt:new Date().toISOString()}));
    const c0=process.hrtime.bigint(); db.exec('COMMIT'); commitNs+=process.hrtime.bigint()-c0; }
  const total=Number(process.hrtime.bigint()-t0)/N/1000;
  const cpu=process.cpuUsage();
  console.log(label.padEnd(30),'per tx',total.toFixed(1),'µs; commit',(Number(commitNs)/N/1000).toFixed(1),'µs');
}
run('default autocheckpoint');
run('autocheckpoint off', db=>db.pragma('wal_autocheckpoint = 0'));
run('autocheckpoint 10000', db=>db.pragma('wal_autocheckpoint = 10000'));
