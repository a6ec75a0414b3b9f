#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(){
  char *buf = aligned_alloc(4096, 1<<22);
  memset(buf,1,1<<22);
  long sizes[] = {512, 1024, 2048, 4096, 8192, 32768, 262144};
  long ds[] = {8, 16, 24, 32, 48, 63, -8, -16, -64};
  for (int s=0;s<7;s++){ long n = sizes[s];
    printf("size %6ld:", n);
    long base = (n + 4095) & ~4095L;
    for (int k=0;k<9;k++){ long d = base + ds[k] + (ds[k] < 0 ? 4096 : 0);
      char *src = buf + 0x90; char *dst = src + d;
      double best=1e18;
      for(int r=0;r<5;r++){ double t=now(); for(int i=0;i<200;i++){ memcpy(dst,src,n); __asm__ volatile(""::"r"(dst):"memory");} double e=(now()-t)/200; if(e<best)best=e;}
      printf(" %+ld:%.0f", ds[k], best);
    }
    printf("\n");
  }
}
