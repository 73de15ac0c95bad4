# A performance model of memo's CUDA kernels at the 852M LLaMA of scripts/gpu-check.sh (bf16, keep,
# AdamW, clip on), written before the next GPU run: bench/cuda/performance_model.md explains every
# rate, assumption and formula here. Prints each kernel's expected time, floor and calls a step at
# 4K and 32K tokens. Run: python3 bench/cuda/performance_model.py
import math
BW=4.3e12; MMA=790e12; FP32=132*128*2*1.98e9; SM=132; F=1.98e9
ISSUE=SM*4*F            # warp-instructions / s (1 per SMSP per clk)
L_HBM=0.8e-6; L_L2=0.16e-6; GAP=2e-6   # loaded HBM latency, L2 hit latency, GPU-side gap per launch
GEMM_EFF=0.85           # cuBLASLt bf16 mainloop efficiency vs 790 (per-SM 5.09 TF/s)
SGEMM_EFF=0.75          # fp32 SIMT SGEMM efficiency vs 66.9 TF/s
C=2048; FF=5632; V=32000; H=32; HKV=8; D=64; QD=2048; KD=512; L=16; N=852_559_872
def resident(regs, threads=256, smem=0):
    warps_regs = 65536 // (math.ceil(regs/8)*8*threads)
    b = min(2048//threads, warps_regs, (228*1024)//smem if smem else 99, 32)
    return b
def item_kernel(n, bytes_per, instr, loads_chain, regs, stores_only=False):
    """grid-stride for_each/RowCol: 1 item a thread (grid <= 2^20 blocks of 256)"""
    R = SM*resident(regs)*256
    lat = (0 if stores_only else loads_chain) + instr*6/F      # per-item latency chain
    t_lat = n*lat/R if not stores_only else 0
    t_issue = n/32*instr/ISSUE
    t_bw = n*bytes_per/BW
    return max(t_lat,t_issue,t_bw)+GAP, t_bw, dict(R=R,lat=lat,t_lat=t_lat,t_issue=t_issue)
def gemm(M,Nn,K,dtype='bf16',tm=128,tn=128):
    flop=2*M*Nn*K
    ctas=math.ceil(M/tm)*math.ceil(Nn/tn)
    waves=math.ceil(ctas/SM)
    rate=(MMA*GEMM_EFF if dtype=='bf16' else FP32*SGEMM_EFF)/SM   # per SM
    t_cta=2*tm*tn*K/rate
    t=waves*t_cta+GAP
    floor=flop/(MMA if dtype=='bf16' else FP32)
    return t, flop, floor, ctas, waves
rows=[]
def fmt(x): return f"{x*1e3:.3f}"
for T in (4096,32768):
    chunk=min(T,(1<<24)//V); nch=math.ceil(T/chunk); P=T//256
    R={}
    def add(name, calls, t_call, floor_call, flop_call=0, bytes_call=0, note=''):
        R[name]=dict(calls=calls,t=t_call,floor=floor_call,flop=flop_call,bytes=bytes_call,note=note)
    # embedding forward: RowCol, id load then wte load (dependent)
    n=T*C; t,fl,_=item_kernel(n,4,110,L_L2+L_HBM,28); add('embedding_forward',1,t,fl,0,n*4)
    # rmsnorm forward: block/row, 256 lanes, 8 elems/lane; 2 batches (unroll 4) HBM + tree 8 syncs + 2 batches L2
    chain=2*L_HBM+8*60/F+2*L_L2; b=resident(32); waves=T/(SM*b); t=waves*chain+GAP; by=T*C*4+T*4
    add('rmsnorm_forward',33,max(t,by/BW+GAP),by/BW,0,by)
    # rmsnorm backward: dx kernel (6 blocks/SM: 40 regs) + column sums (C/32 = 64 blocks x 1024, 1/SM)
    chain=2*L_HBM+8*60/F+2*L_HBM; b=resident(40); t_dx=T/(SM*b)*chain+GAP; by_dx=T*C*2*4
    t_dx=max(t_dx,by_dx/BW+GAP)
    t_cs=(T/32/4)*L_HBM+5*60/F+GAP; by_cs=T*C*4+T*4
    add('rmsnorm_backward',33,t_dx+t_cs,(by_dx+by_cs)/BW,0,by_dx+by_cs,f'dx {t_dx*1e6:.0f} us + dw {t_cs*1e6:.0f} us (64 blocks)')
    R['_rms_parts']=(t_dx,t_cs)
    # panels: q,k,v,o,gate,up, each P launches of 256 rows
    tp=0;flp=0;fll=0
    for Nn,K,tm,tn in ((QD,C,128,128),(KD,C,64,64),(KD,C,64,64),(C,QD,128,128),(FF,C,128,128),(FF,C,128,128)):
        t,fl,flo,ctas,w=gemm(256,Nn,K,'bf16',tm,tn); tp+=t*P; flp+=fl*P; fll+=flo*P
    add('matmul_token_panels',96,tp/6,fll/6,flp/6,0,f'{P} launches a call')
    # rope: q (T*1024 pairs) and k (T*256); 8 B/item + tables (L2)
    tq,flq,_=item_kernel(T*1024,8,150,L_HBM,32); tk,flk,_=item_kernel(T*256,8,150,L_HBM,32)
    add('rope_forward',32,(tq+tk)/2,(flq+flk)/2,0,T*1280*8/2,f'q {tq*1e6:.0f} us, k {tk*1e6:.0f} us')
    add('rope_backward',32,(tq+tk)/2,(flq+flk)/2,0,T*1280*8/2,'as forward')
    # attention: warp-tiles per SMSP, instr per warp-tile, stall allowance
    tiles=T//64; ti=H*tiles*(tiles+1)//2     # tile-iterations (q-tile x k-tile pairs, causal)
    wt=ti*4/(SM*4)                            # warp-tiles per SMSP
    fl_f=4*T*T/2*D*H; fl_b=2.5*fl_f
    t_f=wt*1090*1.5/F+GAP
    t_dq=wt*1014*1.5/F+GAP; t_dkdv=wt*1270*2.0/F+GAP
    t_delta,fl_delta,_=item_kernel(H*T,4*D,300,L_HBM,40)
    add('attention_forward',16,t_f,max(fl_f/MMA,T*(QD+2*KD+QD)*2/BW),fl_f,T*(2*QD+2*KD)*2,f'{ti} tile-its, {wt:.0f} warp-tiles/SMSP')
    add('attention_backward',16,t_dq+t_dkdv+t_delta,max(fl_b/MMA,0),fl_b,T*(4*QD+4*KD)*2,f'delta {t_delta*1e6:.0f} us, dq {t_dq*1e3:.2f} ms, dkdv {t_dkdv*1e3:.2f} ms')
    R['_attn']=(t_f,t_delta,t_dq,t_dkdv,ti,wt)
    # copy D2D (x->h, h->y): bf16 [T, C]
    by=T*C*2*2; add('copy',32,by/(0.7*BW)+GAP,by/BW,0,by)
    # swiglu
    n=T*FF; t,fl,d=item_kernel(n,6,120,L_HBM,28); add('swiglu_forward',16,t,fl,0,n*6)
    t,fl,d=item_kernel(n,10,110,L_HBM,32); add('swiglu_backward',16,t,fl,0,n*10)
    # layer products at full T (1 fwd + 14 bwd per layer)
    shapes=[(T,C,FF)]+[(T,FF,C),(C,FF,T),(T,C,FF),(T,C,FF),(FF,C,T),(FF,C,T),(T,QD,C),(C,QD,T),(T,C,QD),(T,C,KD),(T,C,KD),(QD,C,T),(KD,C,T),(KD,C,T)]
    tm_=0;flm=0;flo_m=0
    for M,Nn,K in shapes:
        t,fl,flo,ctas,w=gemm(M,Nn,K); tm_+=t; flm+=fl; flo_m+=flo
    add('matmul (layers, bf16)',15*L,tm_/15,flo_m/15,flm/15,0,'1 fwd + 14 bwd a layer')
    # head: logits bf16 -> f32 (M=chunk), CE, converts, 2 SGEMMs
    t_log=0;fl_log=0;flo_log=0;t_sg=0;fl_sg=0;flo_sg=0;t_ce=0;by_ce=0;t_cv=0;by_cv=0
    for i in range(nch):
        n=min(chunk,T-i*chunk)
        t,fl,flo,_,_=gemm(n,V,C); t_log+=t;fl_log+=fl;flo_log+=flo
        t1,fl1,flo1,_,_=gemm(V,C,n,'f32'); t2,fl2,flo2,_,_=gemm(n,C,V,'f32')
        rmw=V*C*8/BW   # dhead f32 read+write (beta 1)
        t_sg+=t1+t2+rmw; fl_sg+=fl1+fl2; flo_sg+=flo1+flo2+rmw
        pass_b=n*V*4; pl=(V/256/4)*L_HBM
        t_ce+=max(pass_b/BW,pl)*2+max(2*pass_b/BW,pl)+GAP; by_ce+=4*pass_b
        for m,bp in ((n*C,6),(V*C,6),(n*C,6),(n*C,6)):
            t,fl,_=item_kernel(m,bp,25,L_HBM,24); t_cv+=t; by_cv+=m*bp
    add('matmul (head logits, bf16)',nch,t_log/nch,flo_log/nch,fl_log/nch)
    add('matmul (head bwd, f32 SGEMM)',2*nch,t_sg/(2*nch),flo_sg/(2*nch),fl_sg/(2*nch),V*C*8,'dhead RMW included')
    add('cross_entropy',nch,t_ce/nch,by_ce/BW/nch,0,by_ce/nch)
    add('convert (head bwd widening)',4*nch,t_cv/(4*nch),by_cv/BW/(4*nch),0,by_cv/(4*nch),'65.5M-elem head widened every chunk')
    # loss sum: one thread per 4096 losses, 4096 serial L2 loads
    add('sum (loss)',1,4096*L_L2+10e-6,T*4/BW,0,T*4,'serial chain, 0.16 us a load')
    # fill dres + zero_grads; embedding backward; sum_squares; scale; adamw; convert working
    t1,fl1,_=item_kernel(T*C,2,40,0,26,True); t2,fl2,_=item_kernel(N,4,40,0,26,True)
    add('fill',2,(t1+t2)/2,(fl1+fl2)/2,0,(T*C*2+N*4)/2,f'dres {t1*1e6:.0f} us, grads {t2*1e3:.2f} ms')
    add('embedding_backward',1,T*(2*L_L2+40/F)+GAP,T*C*10/BW,0,T*C*10,'8 blocks; chain ~0.35 us a token')
    add('sum_squares',1,N*4/(BW*0.2)+10e-6,N*4/BW,0,N*4,'DRAM efficiency 20% (scattered 32 B sectors)')
    t,fl,_=item_kernel(N,8,40,L_HBM,24); add('scale (clip)',1,t,fl,0,N*8)
    # adamw: per tensor; sum over tensors
    tensors=[V*C,V*C,C]+[C,QD*C,KD*C,KD*C,C*QD,C,FF*C,FF*C,C*FF]*L
    ta=0;fa=0
    for m in tensors:
        t,fl,_=item_kernel(m,28,100,L_HBM,38); ta+=t; fa+=fl
    add('adamw_update',147,ta/147,fa/147,0,N*28/147)
    t,fl,_=item_kernel(N,6,25,L_HBM,24); add('convert (working weights)',1,t,fl,0,N*6)
    rows.append((T,R,nch,P))
import json
for T,R,nch,P in rows:
    print('T',T,'chunks',nch,'panels',P)
    tot=0;totf=0
    for k,v in R.items():
        if k.startswith('_'): continue
        tot+=v['calls']*v['t']; totf+=v['calls']*v['floor']
        print(f"  {k:32s} calls {v['calls']:5d}  t/call {v['t']*1e6:10.1f} us  floor {v['floor']*1e6:9.1f} us  step {v['calls']*v['t']*1e3:8.2f} ms  floor {v['calls']*v['floor']*1e3:7.2f} ms  GF {v['flop']/1e9:8.1f}  MB {v['bytes']/1e6:8.1f}  {v['note']}")
    print('  TOTAL expected %.1f ms, floor %.1f ms'%(tot*1e3,totf*1e3))
    print('  attn parts', [f'{x:.4g}' for x in R['_attn']])
print()
for T,R,nch,P in rows:
    ex=[]
    for k,v in R.items():
        if k.startswith('_'): continue
        fl=v['floor']
        if 'SGEMM' in k: fl=v['flop']/MMA
        ex.append((v['calls']*(v['t']-fl)*1e3,k,v['calls']*v['t']*1e3,v['calls']*fl*1e3))
    ex.sort(reverse=True)
    print('T',T, 'sum floor(bf16 for head) %.1f'%sum(e[3] for e in ex))
    for e in ex[:14]: print('   %-32s above floor %8.2f ms  (expected %8.2f, floor %7.2f)'%(e[1],e[0],e[2],e[3]))
    launches=sum(v['calls'] for k,v in R.items() if not k.startswith('_'))+96*(P-1)+33+32
    print('   launches/step ~',launches)
